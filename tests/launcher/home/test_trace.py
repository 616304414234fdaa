"""launcher.home.trace: writing, reading, merging and finding trace.jsonl files."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.auth.tokens import FormationKey
from launcher.home import formations, records, running_records
from launcher.home.trace import (
    TraceWriter,
    find_formation_traces,
    find_session_trace,
    formation_peer_traces,
    merge_traces,
    read_trace,
    timestamp,
)
from launcher.ids import new_formation_id, new_session_id


def test_each_record_has_ts_and_event_and_lands_at_once(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as trace:
        written = trace.write("session_start", formation_id="frm_x", callees=["a", "b"])
        # No buffering: another reader sees the line before close.
        first = json.loads(path.read_text().splitlines()[0])
        assert first == written
        trace.write("session_end", exit_status="ok", code=None)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    records_read = [json.loads(line) for line in lines]
    assert list(records_read[0])[:2] == ["ts", "event"]
    assert records_read[1] == {"ts": records_read[1]["ts"], "event": "session_end",
                               "exit_status": "ok", "code": None}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_ts_is_iso8601_utc_with_microseconds(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "t.jsonl") as trace:
        ts = trace.write("x")["ts"]
    assert len(ts) == len("2026-10-23T21:44:57.123456Z") and ts.endswith("Z")
    parsed = datetime.fromisoformat(ts)
    assert parsed.tzinfo is not None and parsed.utcoffset() == UTC.utcoffset(None)
    assert abs((datetime.now(UTC) - parsed).total_seconds()) < 5
    assert timestamp(datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)) == (
        "2026-01-02T03:04:05.000006Z")


def test_writes_append_to_an_existing_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as trace:
        trace.write("one")
    with TraceWriter(path) as trace:
        trace.write("two")
    assert [r["event"] for r in read_trace(path)] == ["one", "two"]


def test_reserved_field_names_and_closed_writers_are_refused(tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "t.jsonl")
    with pytest.raises(ValueError):
        trace.write("x", ts="then")
    trace.close()
    trace.close()
    assert trace.closed
    with pytest.raises(ValueError, match="closed"):
        trace.write("x")


def test_values_that_are_not_json_are_written_as_text(tmp_path: Path) -> None:
    with TraceWriter(tmp_path / "t.jsonl") as trace:
        trace.write("x", path=Path("/a/b"), text="héllo \ud800")
    (record,) = read_trace(tmp_path / "t.jsonl")
    assert record["path"] == "/a/b"
    assert record["text"].startswith("héllo")


def test_a_formation_token_in_a_field_never_reaches_the_trace(tmp_path: Path) -> None:
    token = FormationKey.generate().mint(formation=new_formation_id(), caller="planner",
                                         callee="coder")
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as trace:
        trace.write("member_call", note=f"used {token} here", nested={"list": [token]})
    text = path.read_text()
    assert token not in text and "mft1." not in text
    assert "[redacted]" in text


def test_a_trace_writer_refuses_a_planted_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    (tmp_path / "trace.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        TraceWriter(tmp_path / "trace.jsonl")
    assert not target.exists()


def test_read_trace_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"ts":"2026-01-01T00:00:00.000000Z","event":"a"}\n'
                     b'\n[1,2]\n'
                     b'{"ts":"2026-01-01T00:00:01.000000Z","event":"b"}\n'
                     b'{"ts":"2026-01-01T00:00:02.0000')
    assert [r["event"] for r in read_trace(path)] == ["a", "b"]
    with pytest.raises(FileNotFoundError):
        read_trace(tmp_path / "missing.jsonl")


SIGNAL_WRITER = textwrap.dedent("""
    import os, signal, sys
    from launcher.home.trace import TraceWriter
    trace = TraceWriter(sys.argv[1])
    def on_term(signum, frame):
        trace.write("session_end", exit_status="canceled")
        os._exit(0)
    signal.signal(signal.SIGTERM, on_term)
    print("up", flush=True)
    i = 0
    while True:
        trace.write("task_state", i=i, text="x" * 200)
        i += 1
""")


def test_a_signal_handler_can_write_while_the_main_code_writes(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    child = subprocess.Popen([sys.executable, "-c", SIGNAL_WRITER, str(path)],
                             stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"up\n"
        time.sleep(0.1)
        child.send_signal(signal.SIGTERM)
        assert child.wait(10) == 0
    finally:
        child.kill()
        child.wait()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    parsed = [json.loads(line) for line in lines[:-1]]  # every line whole
    assert parsed[-1]["event"] == "session_end"
    assert len(parsed) > 2


def test_merge_traces_orders_by_time_and_tags_each_member(tmp_path: Path) -> None:
    planner, coder = tmp_path / "p.jsonl", tmp_path / "c.jsonl"
    planner.write_text(
        '{"ts":"2026-01-01T00:00:00.000001Z","event":"session_start"}\n'
        '{"ts":"2026-01-01T00:00:00.000300Z","event":"member_call","callee":"coder"}\n'
        '{"ts":"2026-01-01T00:00:00.000900Z","event":"session_end"}\n')
    coder.write_text(
        '{"ts":"2026-01-01T00:00:00.000000Z","event":"session_start","member":"x"}\n'
        '{"ts":"2026-01-01T00:00:00.000300Z","event":"a2a_task_received"}\n'
        '{"ts":"2026-01-01T00:00:00.000500+00:00","event":"formation_ended"}\n'
        '{"event":"no_ts"}\n')
    merged = merge_traces({"planner": planner, "coder": coder,
                           "gone": tmp_path / "missing.jsonl"})
    assert [(r["member"], r["event"]) for r in merged] == [
        ("coder", "session_start"),
        ("planner", "session_start"),
        ("planner", "member_call"),      # same instant: source order
        ("coder", "a2a_task_received"),
        ("coder", "formation_ended"),
        ("planner", "session_end"),
        ("coder", "no_ts"),              # no time: last
    ]
    assert list(merged[2])[:3] == ["ts", "event", "member"]
    assert merged[2]["callee"] == "coder"
    assert merged[0]["member"] == "coder"  # the tag wins over a field of that name
    assert merge_traces([("coder", coder)])[0]["event"] == "session_start"


def write_session(workdir: Path, *, formation: str | None, member: str | None) -> Path:
    staged = records.stage_session(workdir, new_session_id())
    with TraceWriter(staged.trace) as trace:
        fields = {} if formation is None else {"formation_id": formation,
                                               "formation_member": member}
        trace.write("session_start", **fields)
        trace.write("session_end", exit_status="ok")
    return staged.trace


def test_find_formation_traces_finds_the_entry_and_every_peer(tmp_path: Path) -> None:
    formation = new_formation_id()
    project = tmp_path / "project"
    (project / "deep" / "ses_not_a_real_one").mkdir(parents=True)
    entry = write_session(project, formation=formation, member="planner")
    formations.make_formation_dir(formation)
    coder = write_session(formations.make_peer_dir(formation, "coder"),
                          formation=formation, member="coder")
    reviewer = write_session(formations.make_peer_dir(formation, "reviewer"),
                             formation=formation, member="reviewer")
    write_session(project, formation=None, member=None)              # standalone
    write_session(project, formation=new_formation_id(), member="planner")  # other one
    found = find_formation_traces(formation)
    assert sorted(found) == sorted([("planner", entry), ("coder", coder),
                                    ("reviewer", reviewer)])
    assert sorted(formation_peer_traces(formation)) == sorted(
        [("coder", coder), ("reviewer", reviewer)])
    merged = merge_traces(found)
    assert {r["member"] for r in merged} == {"planner", "coder", "reviewer"}


def test_a_removed_formation_dir_leaves_only_the_entry_members_trace(
        tmp_path: Path) -> None:
    formation = new_formation_id()
    entry = write_session(tmp_path, formation=formation, member="planner")
    formations.make_formation_dir(formation)
    write_session(formations.make_peer_dir(formation, "coder"), formation=formation,
                  member="coder")
    import shutil
    shutil.rmtree(formations.formation_records(formation))
    assert find_formation_traces(formation) == [("planner", entry)]


def test_find_formation_traces_with_no_records_is_empty() -> None:
    assert find_formation_traces(new_formation_id()) == []
    with pytest.raises(ValueError):
        find_formation_traces("frm_nope")


def test_find_session_trace_uses_the_running_record_or_searches(tmp_path: Path) -> None:
    trace = write_session(tmp_path, formation=None, member=None)
    session = trace.parent.name
    assert find_session_trace(session) == trace
    running_records.write_running(running_records.RunningRecord(
        id=session, pid=os.getpid(), start=None, kind="session",
        records_dir=str(trace.parent)))
    assert find_session_trace(session) == trace
    assert find_session_trace(new_session_id()) is None
    with pytest.raises(ValueError):
        find_session_trace("../x")
