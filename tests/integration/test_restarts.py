"""Restarts (docs/restarts.md) in a real formation: a peer with ``restart: on-failure``
killed with SIGKILL comes back as the same member and answers its callers again, its
earlier tasks readable through its new door; a call in flight at the kill fails at once
with a reason, never at its deadline; past ``restart_limit`` the peer stays down, with
one launcher line each time; ``mur ps`` counts the restarts; the trace has
``member_restarted``."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.home.records import read_operator_token, session_records
from tests.support.formation import (
    install_capsule,
    kill_group_quietly,
    launcher_env,
    member_traces,
    mur,
    read_formation_line,
    start_launcher,
    write_capsule,
)

pytestmark = pytest.mark.integration

CALLER = """
async def run(task):
    what = task.text.removeprefix("call ")
    try:
        return "coder said: " + await (await task.call_member("coder", what))
    except Exception as exc:
        return f"failed: {type(exc).__name__}: {exc}"
"""
CODER = """
import asyncio

async def run(task):
    if task.text.startswith("sleep "):
        await asyncio.sleep(float(task.text.split()[1]))
    return f"code for <{task.text}>"
"""
ROSTER = """roster_version: 2
members:
  - name: planner
    capsule: local/planner
    version: 1.0.0
    entry: true
  - name: coder
    capsule: local/coder
    version: 1.0.0
    restart: on-failure
    restart_limit: {count: 1, within: 10m}
reachability:
  - from: planner
    to: [coder]
"""


@pytest.fixture
def formation(tmp_path: Path, murmur_home: Path) -> Iterator[tuple[subprocess.Popen[bytes],
                                                                    dict[str, Any]]]:
    project = tmp_path / "project"
    project.mkdir()
    install_capsule(project, write_capsule(tmp_path, "planner", CALLER, allow_localhost=True,
                                           lifecycle="{concurrency: 4}"))
    install_capsule(project, write_capsule(tmp_path, "coder", CODER, accept_peers=True,
                                           lifecycle="{concurrency: 4}"))
    (project / "roster.yaml").write_text(ROSTER)
    process = start_launcher(project, "--json",
                             env=launcher_env(MURMUR_HOME=str(murmur_home)))
    try:
        yield process, read_formation_line(process)
    finally:
        kill_group_quietly(process)
        process.wait()
        for member in member_pids(murmur_home):
            try:
                os.kill(member, signal.SIGKILL)
            except ProcessLookupError:
                pass


def member_pids(murmur_home: Path) -> list[int]:
    pids = []
    for traces in member_traces(murmur_home / "records").values():
        pids += [r["pid"] for r in traces if r["event"] == "session_start"]
    return pids


def rpc(door: str, token: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(door + "/", timeout=30, json={
        "jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"})
    document: dict[str, Any] = response.json()
    return document


def operator_of(row: dict[str, Any]) -> tuple[str, str]:
    records = session_records(row["workdir"], row["session_id"])
    return row["door_url"], read_operator_token(records.operator_token)


def ask(entry: tuple[str, str], text: str, wait: bool = True) -> dict[str, Any]:
    answer = rpc(*entry, "SendMessage", {
        "message": {"messageId": f"m-{text}-{time.monotonic()}", "role": "ROLE_USER",
                    "parts": [{"text": text}]},
        "configuration": {"returnImmediately": not wait}})
    task: dict[str, Any] = answer["result"]["task"]
    return task


def result(task: dict[str, Any]) -> str:
    return "".join(part["text"] for part in task["artifacts"][0]["parts"])


def settled(entry: tuple[str, str], task_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task: dict[str, Any] = rpc(*entry, "GetTask", {"id": task_id})["result"]
        if task["status"]["state"] not in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
            return task
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} still running after {timeout} s")


def coder_sessions(murmur_home: Path) -> list[list[dict[str, Any]]]:
    """Each of the coder's sessions' trace records, oldest first."""
    sessions = []
    for trace in (murmur_home / "records").rglob("trace.jsonl"):
        records = [json.loads(line) for line in trace.read_text().splitlines() if line]
        if records and records[0].get("formation_member") == "coder":
            sessions.append(records)
    return sorted(sessions, key=lambda records: records[0]["ts"])


def stored_ids(records_dir: str) -> list[str]:
    with sqlite3.connect(Path(records_dir) / "tasks.db") as db:
        return [row[0] for row in db.execute("SELECT id FROM tasks")]


def test_a_killed_peer_comes_back_answers_its_callers_and_stays_down_past_its_limit(
        formation: tuple[subprocess.Popen[bytes], dict[str, Any]], murmur_home: Path) -> None:
    process, line = formation
    rows = {row["name"]: row for row in line["members"]}
    entry = operator_of(rows["planner"])
    assert result(ask(entry, "call first")) == "coder said: code for <first>"
    first_session = session_records(rows["coder"]["workdir"], rows["coder"]["session_id"])
    deadline = time.monotonic() + 5
    while not stored_ids(str(first_session.dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    (earlier_task,) = stored_ids(str(first_session.dir))

    # A call in flight when its callee is killed fails at once, with a reason.
    in_flight = ask(entry, "call sleep 60", wait=False)
    deadline = time.monotonic() + 10
    while len(stored_ids(str(first_session.dir))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = time.monotonic()
    os.kill(rows["coder"]["pid"], signal.SIGKILL)
    failed = result(settled(entry, in_flight["id"], timeout=20))
    failed_after = time.monotonic() - killed
    assert failed.startswith("failed: "), failed
    assert failed_after < 15, failed_after        # its deadline is the call's, far later

    # It comes back: the caller's next call reaches its new door.
    answered_after = None
    while time.monotonic() - killed < 30:
        answer = result(ask(entry, "call second"))
        if answer == "coder said: code for <second>":
            answered_after = time.monotonic() - killed
            break
        time.sleep(0.05)
    assert answered_after is not None, answer
    listed = mur("ps", "--json", env=launcher_env(MURMUR_HOME=str(murmur_home)))
    (shown,) = json.loads(listed.stdout)["formations"]
    coder_row = next(m for m in shown["members"] if m["member"] == "coder")
    assert coder_row["restarts"] == 1 and coder_row["session_id"] != rows["coder"]["session_id"]
    # Its earlier task, through its new door; the task live at the kill FAILED there.
    new_coder = {**rows["coder"], "session_id": coder_row["session_id"],
                 "door_url": coder_row["door_url"]}
    earlier = rpc(*operator_of(new_coder), "GetTask", {"id": earlier_task})["result"]
    assert earlier["status"]["state"] == "TASK_STATE_COMPLETED"
    assert result(earlier) == "code for <first>"

    # Past restart_limit (1 within 10m) the next failure leaves it down.
    os.kill(coder_row["pid"], signal.SIGKILL)
    down = ""
    for _ in range(100):
        down = result(ask(entry, "call third"))
        if down.startswith("failed: "):
            break
        time.sleep(0.1)
    assert down.startswith("failed: "), down
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    stderr = err.decode()
    restarted = [text for text in stderr.splitlines() if "restarted it as session" in text]
    assert len(restarted) == 1, stderr
    assert restarted[0].startswith("[mur run] member `coder` ended with signal 9; restarted "
                                   f"it as session {coder_row['session_id']} (restart 1 of "
                                   "1 within 10m)")
    assert ("member `coder` ended with signal 9 while the formation runs; it was restarted "
            "1 times within 10m, its restart_limit: it stays down") in stderr, stderr
    sessions = coder_sessions(murmur_home)
    assert len(sessions) == 2
    marks = [r for r in sessions[1] if r["event"] == "member_restarted"]
    assert marks and marks[0]["restarted_from"] == rows["coder"]["session_id"]
    restored = [r for r in sessions[1] if r["event"] == "tasks_restored"]
    assert restored and restored[0]["failed"] == 1
    print(f"in flight failed after {failed_after:.2f} s; answering again after "
          f"{answered_after:.2f} s")
