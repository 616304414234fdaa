"""docs/roster.md's example roster is one admission's structure checks accept."""

from __future__ import annotations

import re

from launcher.admission.roster import parse_roster
from tests.support.formation import REPO

PAGE = REPO / "docs" / "roster.md"


def test_the_example_roster_has_the_shape_admission_accepts() -> None:
    [example] = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    roster = parse_roster(example)
    assert [member.name for member in roster.members] == ["planner", "coder", "reviewer"]
    assert [(rule.caller, list(rule.callees)) for rule in roster.rules] == [
        ("planner", ["coder", "reviewer"]), ("reviewer", ["coder"])]
