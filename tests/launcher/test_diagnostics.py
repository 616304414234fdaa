"""The one table of diagnostics, how a diagnostic prints, and docs/diagnostics.md."""

from __future__ import annotations

import io
import json
import re
import string
from pathlib import Path

import pytest

from launcher import diagnostics
from launcher.diagnostics import (
    CODES,
    DOCS_PATH,
    TABLE,
    Diagnostic,
    DiagnosticError,
    diagnostic,
    emit,
    explain,
    lookup,
    render_docs,
)

#: Every code of the roster format (docs/diagnostics.md: "Part of the roster format").
REFERENCE_CODES = [f"E-ROS-00{n}" for n in range(1, 9)] + [
    "E-REG-005", "W-ROS-001", "E-MAN-003", "E-RUN-040", "E-RUN-045", "E-RUN-046",
    "E-RUN-047", "E-RUN-053", "W-RUN-007", "W-RUN-008", "W-SEC-013"]
#: Codes this project adds (docs/diagnostics.md: "Added by murmur-door").
PROJECT_CODES = ["E-MAN-001", "E-MAN-002"]


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.parametrize("code", REFERENCE_CODES + PROJECT_CODES)
def test_every_named_code_is_in_the_table(code: str) -> None:
    entry = CODES[code]
    assert entry.severity == ("error" if code.startswith("E") else "warning")
    assert entry.meaning and entry.title and entry.message and entry.hint


@pytest.mark.parametrize("code", REFERENCE_CODES)
def test_codes_the_reference_names_say_so(code: str) -> None:
    assert CODES[code].named_by == "reference"


def test_new_codes_extend_the_reference_families_only() -> None:
    families = {code.split("-")[1] for code in REFERENCE_CODES + PROJECT_CODES}
    assert {entry.code.split("-")[1] for entry in TABLE} == families


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_template_fills_from_its_placeholders(code: str) -> None:
    entry = CODES[code]
    names = placeholders(entry.message) | placeholders(entry.hint)
    made = diagnostic(code, "somewhere", **{name: f"<<{name}>>" for name in names})
    for name in names:
        assert f"<<{name}>>" in made.message + made.hint
    assert not re.search(r"\{[a-z_]+\}", made.message + made.hint)


def test_a_diagnostic_renders_as_two_lines() -> None:
    made = Diagnostic("E-ROS-004", "error", "roster.yaml: broken", "fix it", "members[0]")
    assert made.render() == "error E-ROS-004: roster.yaml: broken\n  hint: fix it"
    warning = diagnostic("W-ROS-001", "members[1]", file="roster.yaml", field="members[1]",
                         callers=3, member="coder", names="a, b, c", holds="1 task",
                         concurrency=1, queue_depth=0, needed=2, capsule="local/coder")
    first, second = warning.render().split("\n")
    assert first.startswith("warning W-ROS-001: roster.yaml: members[1]: 3 members may call")
    assert second == ("  hint: set `lifecycle.queue_depth: 2` in the murmur.yaml of local/coder "
                      "so that it holds every caller, then pack and install it again; until "
                      "then a caller that finds it full is told it is busy and offers the task "
                      "again until its deadline")


def test_to_json_has_exactly_the_five_keys() -> None:
    made = diagnostic("E-ROS-002", "members", file="roster.yaml", found="no member has")
    assert made.to_json() == {
        "code": "E-ROS-002", "severity": "error",
        "message": "roster.yaml: no member has `entry: true`; exactly one member must",
        "hint": CODES["E-ROS-002"].hint, "path": "members"}


def test_diagnostic_error_carries_its_diagnostic() -> None:
    error = DiagnosticError("E-RUN-046", "MURMUR_FORMATION_CHANNEL", problem="no first line")
    assert error.code == "E-RUN-046"
    assert error.path == "MURMUR_FORMATION_CHANNEL"
    assert str(error) == error.diagnostic.render()
    assert error.diagnostic.message == "formation refused: no first line"
    assert DiagnosticError(error.diagnostic).diagnostic is error.diagnostic


def test_a_missing_placeholder_renders_visibly_never_raises() -> None:
    made = diagnostic("E-RUN-047")
    assert "<capsule>" in made.message and "<expected>" in made.message


def test_lookup_takes_any_case_and_refuses_unknown_codes() -> None:
    assert lookup(" e-ros-004 ").code == "E-ROS-004"
    with pytest.raises(KeyError):
        lookup("E-ROS-999")


def test_a_formation_token_never_reaches_a_message() -> None:
    token = "mft1.eyJmb3JtYXRpb24iOiJmcm1fMSJ9.c2lnbmF0dXJlc2lnbmF0dXJl"
    made = diagnostic("E-RUN-046", f"fd {token}", problem=f"the line held {token}")
    assert "eyJmb3Jt" not in made.message + (made.path or "")
    assert "[redacted]" in made.message and "mft1." not in made.message


def test_a_bearer_credential_never_reaches_a_message() -> None:
    made = diagnostic("W-SEC-013", problem="Authorization: Bearer s3cr3t-0123456789abcdefghij",
                      fix="x")
    assert "s3cr3t" not in made.message
    assert "bearer and jwt credentials" in diagnostic("E-ROS-006").hint


def test_emit_prints_rendered_or_json_lines() -> None:
    made = diagnostic("E-ROS-003", "members[1].name", file="roster.yaml",
                      field="members[1].name", name="coder", first="members[0]")
    human, machine = io.StringIO(), io.StringIO()
    emit(made, human, json_mode=False)
    emit(made, machine, json_mode=True)
    assert human.getvalue() == made.render() + "\n"
    assert json.loads(machine.getvalue()) == made.to_json()


def test_explain_prints_meaning_message_and_hint() -> None:
    text = explain("e-ros-008")
    assert text.startswith("E-ROS-008 (error, part of the roster format)")
    assert "never called by a peer" in text
    assert "hint:" in text and "message: error E-ROS-008:" in text


def test_explain_never_prints_a_template_placeholder() -> None:
    for entry in TABLE:
        shown = explain(entry.code).split("\nmessage: ", 1)[1]
        assert re.search(r"\{[a-z_]+\}", shown) is None, (entry.code, shown)
        hint = shown.split("hint:", 1)[1]
        assert not re.fullmatch(r"\s*<[a-z ]+>\s*", hint), (entry.code, hint)


# --- docs/diagnostics.md -----------------------------------------------------------------

def test_the_diagnostics_page_is_not_stale() -> None:
    assert DOCS_PATH.read_text(encoding="utf-8") == render_docs(), (
        "docs/diagnostics.md is stale: run `python -m launcher.diagnostics --write-docs`")


def test_the_page_has_an_anchor_and_a_section_for_every_code() -> None:
    page = render_docs()
    for entry in TABLE:
        assert f"](#{entry.code.lower()})" in page
        assert f"\n### {entry.code}\n" in page


def test_check_fails_on_a_stale_page_and_write_docs_fixes_it(tmp_path: Path) -> None:
    page = tmp_path / "diagnostics.md"
    page.write_text("# old\n")
    assert diagnostics.main(["--check", "--path", str(page)]) == 1
    assert diagnostics.main(["--write-docs", "--path", str(page)]) == 0
    assert diagnostics.main(["--check", "--path", str(page)]) == 0
    assert page.read_text() == render_docs()
