"""Every command that takes a formation or session id answers a bad one alike
(docs/cli.md, "Exit status"): an argument that is not an id is a usage error, 2, as
argparse's own; a well-formed id that names nothing is 1, a failure with a message
(``mur audit`` excepted: its 1 means violations, so a formation it cannot audit is 2)."""

from __future__ import annotations

import pytest

from launcher.cli import main
from launcher.ids import new_formation_id, new_session_id

#: Each command's words around the id (``{}``).
COMMANDS = {
    "send": ["send", "{}", "hello"],
    "stop": ["stop", "{}"],
    "cancel": ["cancel", "{}", "some-task"],
    "logs": ["logs", "{}"],
    "trace show": ["trace", "show", "{}"],
    "audit": ["audit", "{}"],
    "approvals": ["approvals", "{}"],
    "approve": ["approve", "{}", "worker", "some-task"],
    "deny": ["deny", "{}", "worker", "some-task"],
    "graph": ["graph", "{}"],
}
#: The commands that take a session's id as well as a formation's.
SESSIONS_TOO = {"send", "stop", "cancel", "logs", "trace show"}


def run(capsys: pytest.CaptureFixture[str], command: str, ident: str) -> tuple[int, str]:
    status = main([ident if word == "{}" else word for word in COMMANDS[command]])
    captured = capsys.readouterr()
    return status, captured.err


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("ident", ["planner", "frm_zz", "frm_" + "g" * 32, "ses_", "-"])
def test_an_argument_that_is_not_an_id_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], command: str, ident: str) -> None:
    status, err = run(capsys, command, ident)
    assert status == 2, err
    assert f"mur {command}:" in err and "Traceback" not in err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_well_formed_formation_id_that_names_nothing_is_a_failure(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    ident = new_formation_id()
    status, err = run(capsys, command, ident)
    assert status == (2 if command == "audit" else 1), err
    assert ident in err


@pytest.mark.parametrize("command", sorted(SESSIONS_TOO))
def test_a_well_formed_session_id_that_names_nothing_is_a_failure(
        capsys: pytest.CaptureFixture[str], command: str) -> None:
    ident = new_session_id()
    status, err = run(capsys, command, ident)
    assert status == 1, err
    assert ident in err
