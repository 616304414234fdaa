"""The operator commands' pieces in-process: finding a door, reading a stream, ``mur ps``'s
grouping, ``mur trace show``'s lines, and the refusals that need nothing running."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.commands import ps, send, stop
from launcher.commands import trace as trace_command
from launcher.home import records, running_records
from launcher.home.running_records import RunningRecord
from launcher.home.trace import TraceWriter
from launcher.ids import new_formation_id, new_session_id
from launcher.spawn.process import process_start_time


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield child
    child.kill()
    child.wait()


def record_of(pid: int, ident: str, kind: str, **fields: str) -> RunningRecord:
    return RunningRecord(id=ident, pid=pid, start=process_start_time(pid),
                         kind=kind, started=running_records.now_iso(), **fields)  # type: ignore[arg-type]


def test_stop_refuses_what_is_not_an_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert stop.stop(argparse.Namespace(id="planner", json=False)) == 2
    assert "neither a formation id" in capsys.readouterr().err


def test_stop_of_a_formation_that_is_not_running_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    fid = new_formation_id()
    assert stop.stop(argparse.Namespace(id=fid, json=False)) == 1
    assert f"formation {fid} is not running" in capsys.readouterr().err


def test_stop_of_a_session_sends_sigterm_and_waits_until_it_is_gone(
        other_process: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]) -> None:
    sid = new_session_id()
    running_records.write_running(record_of(other_process.pid, sid, "session"))
    assert stop.stop(argparse.Namespace(id=sid, json=True)) == 0
    assert other_process.wait(5) == -15
    assert json.loads(capsys.readouterr().out) == {
        "id": sid, "kind": "session", "stopped": True, "signalled": [other_process.pid]}


def test_stop_of_a_formation_never_signals_the_launchers_own_members(
        other_process: subprocess.Popen[bytes]) -> None:
    fid = new_formation_id()
    # This process plays the launcher: other_process is its child, as a member would be.
    launcher = record_of(os.getpid(), fid, "launcher", formation_id=fid)
    own = record_of(other_process.pid, new_session_id(), "session", formation_id=fid)
    by_hand = record_of(os.getppid(), new_session_id(), "session", formation_id=fid)
    elsewhere = record_of(os.getppid(), new_session_id(), "session")
    assert stop._formation_targets(fid, [launcher, own, by_hand, elsewhere]) == [
        launcher, by_hand]
    # With the launcher gone, every session of the formation is stopped by mur stop.
    assert stop._formation_targets(fid, [own, by_hand]) == [own, by_hand]


def test_ps_groups_members_under_their_formation(
        other_process: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]) -> None:
    fid = new_formation_id()
    pid = other_process.pid
    running_records.write_running(record_of(pid, fid, "launcher", formation_id=fid,
                                            member="planner", project_dir="/p"))
    entry, peer, alone = new_session_id(), new_session_id(), new_session_id()
    running_records.write_running(record_of(pid, peer, "session", formation_id=fid,
                                            member="coder", door_url="http://127.0.0.1:2"))
    running_records.write_running(record_of(pid, entry, "session", formation_id=fid,
                                            member="planner", door_url="http://127.0.0.1:1"))
    running_records.write_running(record_of(pid, alone, "session", capsule="local/x", version="1"))
    stale = record_of(pid, new_session_id(), "session")
    running_records.write_running(RunningRecord(id=stale.id, pid=pid, start="1", kind="session"))
    assert ps.ps(argparse.Namespace(json=True)) == 0
    state = json.loads(capsys.readouterr().out)
    (formation,) = state["formations"]
    assert formation["formation_id"] == fid
    assert [(m["member"], m["entry"]) for m in formation["members"]] == [
        ("planner", True), ("coder", False)]
    assert [s["session_id"] for s in state["sessions"]] == [alone]
    assert running_records.read_running(stale.id) is None  # pruned
    assert ps.ps(argparse.Namespace(json=False)) == 0
    text = capsys.readouterr().out
    assert f"formation {fid}  launcher pid {pid}" in text
    assert alone in text


def test_ps_with_nothing_running() -> None:
    assert ps.render_ps({"formations": [], "sessions": []}) == "nothing is running\n"


def test_send_finds_the_entry_door_of_a_formation(
        other_process: subprocess.Popen[bytes]) -> None:
    fid = new_formation_id()
    launcher = record_of(other_process.pid, fid, "launcher", formation_id=fid,
                         member="planner", door_url="http://127.0.0.1:9",
                         records_dir="/r/ses")
    door, token, label = send.resolve_door(fid, [launcher])
    assert (door, token, label) == ("http://127.0.0.1:9", Path("/r/ses/operator.token"),
                                    "planner")
    session = record_of(other_process.pid, new_session_id(), "session",
                        door_url="http://127.0.0.1:7/", records_dir="/r/s2")
    assert send.resolve_door("http://127.0.0.1:7", [session])[0] == "http://127.0.0.1:7/"
    assert send.resolve_door(session.id, [session])[1] == Path("/r/s2/operator.token")


@pytest.mark.parametrize("target", ["frm_01a2368f3b5d77e1b655fb43af8393f5", "http://x:1",
                                    "planner", new_session_id()])
def test_send_to_nothing_running_is_a_clear_refusal(target: str) -> None:
    with pytest.raises(send.SendError) as caught:
        send.resolve_door(target, [])
    assert "token" not in str(caught.value).lower() or "operator token" in str(caught.value)


def test_the_follower_builds_the_answer_from_artifacts(
        capsys: pytest.CaptureFixture[str]) -> None:
    follower = send.TaskFollower("planner")
    follower.take({"task": {"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}}})
    follower.take({"statusUpdate": {"status": {"state": "TASK_STATE_WORKING", "message": {
        "parts": [{"text": "thinking"}]}}}})
    follower.take({"artifactUpdate": {"artifact": {"artifactId": "a",
                                                   "parts": [{"text": "hello "}]}}})
    follower.take({"artifactUpdate": {"artifact": {"artifactId": "a",
                                                   "parts": [{"text": "world"}]},
                                      "append": True}})
    follower.take({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}}})
    assert follower.state == "TASK_STATE_COMPLETED"
    assert follower.answer() == "hello world", "one artifact's parts are concatenated"
    err = capsys.readouterr().err.splitlines()
    assert err == ["[planner] submitted", "[planner] working: thinking", "[planner] completed"]


def test_the_follower_keeps_the_reply_a_status_update_replaced_in_the_history() -> None:
    # agent-framework-a2a's default: the reply as a WORKING status message, then
    # COMPLETED with no message and no artifact.
    follower = send.TaskFollower("maf")
    follower.take({"task": {"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"},
                            "history": [{"role": "ROLE_USER", "parts": [{"text": "hi"}]}]}})
    follower.take({"statusUpdate": {"status": {"state": "TASK_STATE_WORKING", "message": {
        "role": "ROLE_AGENT", "parts": [{"text": "the reply"}]}}}})
    follower.take({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}}})
    assert follower.state == "TASK_STATE_COMPLETED"
    assert follower.answer() == "the reply"
    assert [message["parts"][0]["text"] for message in follower.task["history"]] == [
        "hi", "the reply"]


def test_the_follower_takes_a_direct_message_as_the_answer() -> None:
    follower = send.TaskFollower("x")
    follower.take({"message": {"parts": [{"text": "just this"}]}})
    assert follower.state == "TASK_STATE_COMPLETED"
    assert follower.answer() == "just this"


def test_trace_show_of_nothing_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    sid = new_session_id()
    assert trace_command.trace_show(argparse.Namespace(id=sid, json=False)) == 1
    assert f"no trace of session {sid}" in capsys.readouterr().err


def test_trace_show_of_a_session_prints_one_line_a_record(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sid = new_session_id()
    staged = records.stage_session(tmp_path, sid)
    writer = TraceWriter(staged.trace)
    writer.write("session_start", session_id=sid, formation_member="coder")
    writer.write("task_state", task_id="t1", state="TASK_STATE_WORKING\x1b[2J")
    writer.close()
    assert trace_command.trace_show(argparse.Namespace(id=sid, json=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[1:3] == ["coder", "session_start"]
    assert "task_id=t1" in lines[1] and "\x1b" not in lines[1]
    assert trace_command.trace_show(argparse.Namespace(id=sid, json=True)) == 0
    raw = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["event"] for r in raw] == ["session_start", "task_state"]
    assert all(r["member"] == "coder" for r in raw)


def test_ps_shows_a_delegated_child_under_the_session_that_delegated_to_it() -> None:
    fid = new_formation_id()
    boss, child, grandchild, alone, its_child = (new_session_id() for _ in range(5))
    live = [
        RunningRecord(id=fid, pid=10, start=None, kind="launcher", formation_id=fid,
                      member="boss"),
        RunningRecord(id=boss, pid=11, start=None, kind="session", formation_id=fid,
                      member="boss", started="1"),
        RunningRecord(id=child, pid=12, start=None, kind="session", formation_id=fid,
                      capsule="local/summarizer", parent_session=boss, started="2"),
        RunningRecord(id=grandchild, pid=13, start=None, kind="session", formation_id=fid,
                      capsule="local/leaf", parent_session=child, started="3"),
        RunningRecord(id=alone, pid=14, start=None, kind="session", capsule="local/x",
                      version="1", started="4"),
        RunningRecord(id=its_child, pid=15, start=None, kind="session", capsule="local/y",
                      version="2", parent_session=alone, started="5"),
    ]
    state = ps.running_state(live)
    [member] = state["formations"][0]["members"]
    assert member["session_id"] == boss
    [first] = member["children"]
    assert first["session_id"] == child and first["parent_session"] == boss
    assert [row["session_id"] for row in first["children"]] == [grandchild]
    [standalone] = state["sessions"]
    assert [row["session_id"] for row in standalone["children"]] == [its_child]
    text = ps.render_ps(state).splitlines()
    assert any(line.startswith("  boss ") for line in text)
    assert any(line.startswith("  └ child:summarizer ") and child in line for line in text)
    assert any(line.startswith("    └ child:leaf ") and grandchild in line for line in text)
    assert any(line.startswith(f"└ {its_child} ") for line in text)


def test_a_child_whose_parent_is_gone_is_shown_where_its_own_record_places_it() -> None:
    orphan = new_session_id()
    state = ps.running_state([RunningRecord(
        id=orphan, pid=12, start=None, kind="session", capsule="local/s",
        parent_session=new_session_id())])
    assert [row["session_id"] for row in state["sessions"]] == [orphan]
