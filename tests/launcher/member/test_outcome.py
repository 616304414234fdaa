"""How a session ends: every row of the outcome table, result.txt lines, pending codes."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.diagnostics import CODES
from launcher.member.outcome import (
    TASK_NOT_COMPLETED,
    Cause,
    Ending,
    decide,
    member_diagnostic,
    result_text,
)

SESSION = "ses_0190a1b2c3d47e5f8a9b0c1d2e3f4a5b"


def task(state: str, text: str | None = None, *, artifact: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"state": f"TASK_STATE_{state}"}
    if text is not None:
        status["message"] = {"role": "ROLE_AGENT", "parts": [{"text": text}]}
    document: dict[str, Any] = {"id": "t1", "status": status}
    if artifact is not None:
        document["artifacts"] = [{"artifactId": "a", "parts": [{"text": artifact}]}]
    return document


@pytest.mark.parametrize(("cause", "running", "code", "status", "diagnostic"), [
    (Cause.SIGNAL, ("t1",), 1, "canceled", "E-RUN-040"),
    (Cause.SIGNAL, (), 0, "ok", None),
    (Cause.STOP_SESSION, ("t1",), 1, "canceled", "E-RUN-040"),
    (Cause.STOP_SESSION, (), 0, "ok", None),
    (Cause.LIFELINE, ("t1",), 0, "formation_ended", None),
    (Cause.LIFELINE, (), 0, "ok", None),
    (Cause.DEADLINE, ("t1",), 1, "deadline_reached", "E-RUN-053"),
    (Cause.DEADLINE, (), 1, "deadline_reached", "E-RUN-053"),
    (Cause.AFTER_TASK, (), 0, "ok", None),
    (Cause.IDLE_TIMEOUT, (), 0, "ok", None),
])
def test_each_cause_ends_as_the_reference_says(cause: Cause, running: tuple[str, ...],
                                               code: int, status: str,
                                               diagnostic: str | None) -> None:
    outcome = decide(Ending(cause, running), session_id=SESSION, deadline="2026-01-02T03:04:05Z")
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (code, status, diagnostic)


def test_e_run_040_names_the_session_and_the_running_tasks() -> None:
    outcome = decide(Ending(Cause.SIGNAL, ("t1", "t2")), session_id=SESSION)
    assert outcome.diagnostic is not None
    assert SESSION in outcome.diagnostic.message and "t1, t2" in outcome.diagnostic.message


@pytest.mark.parametrize(("state", "code", "status"), [
    ("COMPLETED", 0, "ok"), ("FAILED", 1, "failed"), ("CANCELED", 1, "canceled"),
    ("REJECTED", 1, "rejected")])
def test_the_task_decides_a_task_run(state: str, code: int, status: str) -> None:
    outcome = decide(Ending(Cause.TASK_DONE), session_id=SESSION,
                     task=task(state, "why"), result_path="/r/out/result.txt")
    assert (outcome.exit_code, outcome.exit_status) == (code, status)
    if code:
        assert outcome.code == TASK_NOT_COMPLETED
        assert outcome.diagnostic is not None
        assert "why" in outcome.diagnostic.message
        assert "/r/out/result.txt" in outcome.diagnostic.hint


def test_an_osc52_clipboard_write_in_a_failed_tasks_reason_is_escaped_in_e_run_041() -> None:
    outcome = decide(Ending(Cause.TASK_DONE), session_id=SESSION,
                     task=task("FAILED", "no\x1b]52;c;aGVsbG8=\x07\r[mur run] ended"))
    assert outcome.diagnostic is not None
    assert "no\\x1b]52;c;aGVsbG8=\\x07 [mur run] ended" in outcome.diagnostic.message


def test_a_failure_to_start_carries_its_own_diagnostic() -> None:
    failure = member_diagnostic("E-RUN-047", capsule="local/x", version="1", found="a",
                                expected="b")
    outcome = decide(Ending(Cause.FAILURE, failure=failure), session_id=SESSION)
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (1, "failed", "E-RUN-047")


def test_result_text_is_the_answer_or_one_state_line() -> None:
    assert result_text(task("COMPLETED", artifact="the answer")) == "the answer"
    assert result_text(task("COMPLETED", "a direct reply")) == "a direct reply"
    assert result_text(task("CANCELED", "the formation ended")) == \
        "canceled: the formation ended"
    assert result_text(task("CANCELED")) == "canceled: the task was canceled"
    assert result_text(task("FAILED", "boom\nwith two lines")) == "failed: boom with two lines"
    assert result_text(task("REJECTED", "no")) == "rejected: no"


def test_result_text_of_a_completed_task_takes_the_reply_left_in_its_history() -> None:
    replied = {**task("COMPLETED"), "history": [
        {"role": "ROLE_USER", "parts": [{"text": "hi"}]},
        {"role": "ROLE_AGENT", "parts": [{"text": "the reply"}]}]}
    assert result_text(replied) == "the reply"
    # A text streamed before a task failed is not why it failed.
    failed = {**replied, "status": {"state": "TASK_STATE_FAILED"}}
    assert result_text(failed) == "failed: the task was failed"


def test_a_pending_code_is_printed_with_its_own_text_until_the_table_lists_it() -> None:
    diag = member_diagnostic(TASK_NOT_COMPLETED, task="t1", session=SESSION, state="failed",
                             detail="mft1.abc.def leaked", result="/r")
    assert diag.code == TASK_NOT_COMPLETED and diag.severity == "error"
    assert "t1" in diag.message and "mft1.abc" not in diag.message
    if TASK_NOT_COMPLETED in CODES:  # once the table lists it, the table's text rules
        assert diag.message.startswith(CODES[TASK_NOT_COMPLETED].message.split("{")[0])
