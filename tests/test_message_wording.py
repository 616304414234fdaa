"""The wording of messages, read from the source (no module is imported): a name in
quotes takes no possessive, since `member 'researcher''s door` doubles the quote; such a
message says "the door of member 'researcher'" instead."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: ``{name!r}'s`` and ``'{name}'s``: a possessive right after a quoted name.
QUOTED_POSSESSIVE = re.compile(r"!r\}'s\b|'\{[^{}'\"]*\}'s\b")


def test_no_message_puts_a_possessive_after_a_quoted_name() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for package in ("gateway", "launcher")
             for path in sorted((ROOT / package).rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), start=1)
             if QUOTED_POSSESSIVE.search(line)]
    assert found == []


def test_the_pattern_finds_both_forms() -> None:
    assert QUOTED_POSSESSIVE.search('f"member {callee!r}\'s door"')
    assert QUOTED_POSSESSIVE.search('f"member \'{callee}\'s door"')
    assert not QUOTED_POSSESSIVE.search('f"the door of member {callee!r}"')
