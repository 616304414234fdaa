"""What a child is started with and how its exit becomes an answer."""

from __future__ import annotations

import pytest

from gateway.proxy.call_failed import ERROR, CallFailed
from launcher.ids import new_formation_id
from launcher.member.delegation.child import _outcome, child_environment

PARENT_RUNTIME_ENV = {
    "PATH": "/usr/bin", "LANG": "C.UTF-8", "MURMUR_HOME": "/home/x/.murmur",
    "MURMUR_FORMATION_ID": "frm_parent", "MURMUR_FORMATION_CHANNEL": "7",
    "MURMUR_FORMATION_LIFELINE": "8", "MURMUR_FORMATION_PEERS": "coder",
    "MURMUR_WORKDIR": "/p", "MURMUR_DIAGNOSTICS": "json", "MURMUR_PARENT_SESSION": "ses_x",
    "MURMUR_ISOLATION": "required",
}


def test_a_child_inherits_the_formation_id_and_nothing_else_of_the_formation() -> None:
    formation = new_formation_id()
    env = child_environment(PARENT_RUNTIME_ENV, formation)
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "MURMUR_HOME": "/home/x/.murmur",
                   "MURMUR_ISOLATION": "required", "MURMUR_FORMATION_ID": formation}


def test_a_child_of_a_session_in_no_formation_has_no_formation_id() -> None:
    assert "MURMUR_FORMATION_ID" not in child_environment(PARENT_RUNTIME_ENV, None)


def test_exit_zero_is_the_answer() -> None:
    assert _outcome("child:s", 0, "four words") == "four words"


@pytest.mark.parametrize(("line", "state", "detail"), [
    ("failed: no summary today", "TASK_STATE_FAILED", "no summary today"),
    ("canceled: the formation ended", "TASK_STATE_CANCELED", "the formation ended"),
    ("rejected: not my kind of text", "TASK_STATE_REJECTED", "not my kind of text"),
])
def test_a_task_that_did_not_complete_is_a_call_failed_in_its_state(
        line: str, state: str, detail: str) -> None:
    failure = _outcome("child:s", 1, line)
    assert isinstance(failure, CallFailed)
    assert (failure.member, failure.state, failure.detail) == ("child:s", state, detail)


def test_a_mur_run_that_failed_otherwise_is_an_error_naming_its_status() -> None:
    failure = _outcome("child:s", 2, "")
    assert isinstance(failure, CallFailed) and failure.state == ERROR
    assert "status 2" in failure.detail
