"""``mur run --roster`` with real members: the planner/coder/reviewer formation with and
without ``--task``, the operator's commands against it, how it ends (signals, kill
-KILL, the deadline), and that no token leaks and no member holds another's pipes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from launcher.home import paths, running_records
from tests.support.formation import (
    CODER_AGENT,
    PLANNER_AGENT,
    REVIEWER_AGENT,
    alive,
    kill_group_quietly,
    member_traces,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
    wait_gone,
)

pytestmark = pytest.mark.integration

REACH = {"planner": ["coder", "reviewer"], "reviewer": ["coder"]}
AGENTS = {"planner": PLANNER_AGENT, "coder": CODER_AGENT, "reviewer": REVIEWER_AGENT}
ANSWER = "plan done | code for <write hello> | looks good: <review code for <write hello>>"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return simple_project(tmp_path, ["planner", "coder", "reviewer"], entry="planner",
                          reachability=REACH, agents=AGENTS)


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Launchers a test started; any still running at the end is killed with its group."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        kill_group_quietly(process)
        process.wait()


def launch(launched: list[subprocess.Popen[bytes]], project: Path,
           *args: str) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    process = start_launcher(project, "--json", *args)
    launched.append(process)
    return process, read_formation_line(process, timeout=90)


def pids_of(line: dict[str, Any]) -> dict[str, int]:
    return {member["name"]: member["pid"] for member in line["members"]}


def files_holding(root: Path, needle: bytes) -> list[Path]:
    """Every file under ``root`` (operator.token files aside) that contains ``needle``."""
    found = []
    for current, _dirs, names in os.walk(root):
        for name in names:
            path = Path(current) / name
            if name == "operator.token" or path.is_symlink():
                continue
            try:
                if needle in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def events_of(trace: list[dict[str, Any]]) -> list[str]:
    return [record["event"] for record in trace]


def pipe_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:"):
            inodes.add(target)
    return inodes


# --------------------------------------------------------------------------- with --task


def test_three_members_with_a_task_print_the_result_and_leave_nothing_running(
        project: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    process = start_launcher(project, "--json", "--task", "hello")
    launched.append(process)
    out, err = process.communicate(timeout=120)
    stdout, stderr = out.decode(), err.decode()
    assert process.returncode == 0, stderr
    line, result = stdout.splitlines()
    formation = json.loads(line)
    assert result == ANSWER
    assert [m["name"] for m in formation["members"]] == ["planner", "coder", "reviewer"]
    assert [m["entry"] for m in formation["members"]] == [True, False, False]
    assert "E-RUN-040" not in stderr
    assert wait_gone(pids_of(formation).values(), 5) < 5
    fid = formation["formation_id"]
    traces = member_traces(paths.records_root())
    assert set(traces) == {"planner", "coder", "reviewer"}
    callees = {"planner": ["coder", "reviewer"], "coder": [], "reviewer": ["coder"]}
    for name, trace in traces.items():
        start = trace[0]
        assert start["formation_id"] == fid
        assert start["formation_member"] == name
        assert start["formation_callees"] == callees[name]
        assert events_of(trace)[-1] == "session_end"
    for peer in ("coder", "reviewer"):
        events = events_of(traces[peer])
        assert events.index("formation_ended") < events.index("session_end")
    # No token anywhere: files (operator.token aside), stdout, stderr.
    assert "mft1." not in stdout + stderr
    assert files_holding(murmur_home, b"mft1.") == []
    assert files_holding(project, b"mft1.") == []
    # mur trace show merges every member's records in time order.
    shown = mur("trace", "show", fid, "--json")
    assert shown.returncode == 0, shown.stderr
    merged = [json.loads(text) for text in shown.stdout.splitlines()]
    assert {record["member"] for record in merged} == {"planner", "coder", "reviewer"}
    assert [record["ts"] for record in merged] == sorted(record["ts"] for record in merged)
    assert any(record["event"] == "a2a_task_received" and record["member"] == "coder"
               for record in merged)
    human = mur("trace", "show", fid)
    assert human.returncode == 0
    assert len(human.stdout.splitlines()) == len(merged)
    assert running_records.list_running() == []


# --------------------------------------------------------------------------- without --task


def test_a_formation_without_a_task_serves_the_operator_until_mur_stop(
        project: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    process, formation = launch(launched, project)
    fid = formation["formation_id"]
    pids = pids_of(formation)
    # While it runs: no token in any member's command line or environment...
    for name, pid in pids.items():
        for part in ("cmdline", "environ"):
            with open(f"/proc/{pid}/{part}", "rb") as handle:
                assert b"mft1." not in handle.read(), (name, part)
    # ...and no member holds a pipe of another (channel, lifeline, stdout or stderr).
    inodes = {name: pipe_inodes(pid) for name, pid in pids.items()}
    for first, second in combinations(inodes, 2):
        assert not inodes[first] & inodes[second], (first, second)

    listed = mur("ps", "--json")
    assert listed.returncode == 0, listed.stderr
    (running,) = json.loads(listed.stdout)["formations"]
    assert running["formation_id"] == fid
    assert running["launcher_pid"] == process.pid
    assert {(m["member"], m["entry"], m["pid"]) for m in running["members"]} == {
        ("planner", True, pids["planner"]), ("coder", False, pids["coder"]),
        ("reviewer", False, pids["reviewer"])}
    assert fid in mur("ps").stdout

    sent = mur("send", fid, "hello")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == ANSWER
    assert "[planner] completed" in sent.stderr
    coder_door = next(m["door_url"] for m in formation["members"] if m["name"] == "coder")
    direct = mur("send", coder_door, "just code", "--json")
    assert direct.returncode == 0, direct.stderr
    task = json.loads(direct.stdout)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "mft1." not in sent.stdout + sent.stderr + direct.stdout + direct.stderr

    started = time.monotonic()
    stopped = mur("stop", fid)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == f"stopped formation {fid}"
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    assert wait_gone(pids.values(), 5) < 5
    print(f"mur stop to every member gone: {time.monotonic() - started:.2f}s")
    for name, trace in member_traces(paths.records_root()).items():
        events = events_of(trace)
        assert "formation_ended" in events, name  # the entry member's lifeline closed too
        assert events[-1] == "session_end", name
    assert "E-RUN-040" not in err.decode()
    assert "mft1." not in out.decode() + err.decode()
    assert files_holding(murmur_home, b"mft1.") == []
    again = mur("stop", fid)
    assert again.returncode == 1
    assert f"formation {fid} is not running" in again.stderr
    assert mur("ps").stdout == "nothing is running\n"


# --------------------------------------------------------------------------- signals


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    return simple_project(tmp_path, ["planner", "coder"], entry="planner",
                          reachability={"planner": ["coder"]})


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_to_the_launcher_ends_the_formation(
        pair: Path, launched: list[subprocess.Popen[bytes]], signum: int) -> None:
    process, formation = launch(launched, pair)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()  # a serving formation stopped as asked
    assert wait_gone(pids_of(formation).values(), 5) < 5
    for name, trace in member_traces(paths.records_root()).items():
        events = events_of(trace)
        assert events.index("formation_ended") < events.index("session_end"), name
    assert running_records.list_running() == []


def test_members_run_in_the_launchers_directory_and_keep_their_own_work_folders(
        pair: Path, launched: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    # docs/runtime-files.md ("Paths"): every member's current directory is the launcher's
    # (so a relative --task path names the same file); its work folder is the project
    # directory (entry) or its own directory under formations/ (peers).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    process = start_launcher(pair, "--json", cwd=elsewhere)
    launched.append(process)
    formation = read_formation_line(process, timeout=90)
    for member in formation["members"]:
        assert os.readlink(f"/proc/{member['pid']}/cwd") == str(elsewhere.resolve())
        workdir = Path(member["workdir"])
        expected = pair.resolve() if member["entry"] else (
            paths.formations_root() / formation["formation_id"] / member["name"])
        assert workdir == expected
        assert (paths.workdir_records(workdir) / member["session_id"]).is_dir()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()


# --------------------------------------------------------------------------- kill -KILL


@pytest.mark.parametrize("victim", ["launcher", "entry", "group"])
def test_kill_leaves_no_member_running_within_30_seconds(
        project: Path, launched: list[subprocess.Popen[bytes]], victim: str) -> None:
    process, formation = launch(launched, project)
    pids = pids_of(formation)
    if victim == "launcher":
        os.kill(process.pid, signal.SIGKILL)
        killed = set()
    elif victim == "entry":
        os.kill(pids["planner"], signal.SIGKILL)
        killed = {"planner"}
    else:
        os.killpg(process.pid, signal.SIGKILL)
        killed = {"planner"}
    gone_after = wait_gone(pids.values(), 30)
    print(f"kill -KILL of the {victim}: every member gone after {gone_after:.2f}s")
    assert gone_after < 30
    process.wait(30)
    if victim == "entry":
        assert process.returncode == 128 + signal.SIGKILL
    survivors = member_traces(paths.records_root())
    for name, trace in survivors.items():
        if name in killed:
            continue
        events = events_of(trace)
        assert events[-1] == "session_end", (name, events)
        assert "formation_ended" in events, (name, events)
    assert not any(alive(pid) for pid in pids.values())


# --------------------------------------------------------------------------- the deadline


def test_without_json_every_members_diagnostics_print_as_text(
        pair: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    # Members are started with --json for their readiness line; their diagnostics must
    # still follow the launch's own format: `error E-RUN-053: ...` then `  hint: ...`.
    process = start_launcher(pair, "--deadline", "6s")
    launched.append(process)
    _, err = process.communicate(timeout=60)
    text = err.decode()
    assert process.returncode == 1, text
    assert "error E-RUN-053: " in text
    assert "  hint: " in text
    assert '"code"' not in text


def test_the_deadline_while_running_ends_every_member_at_the_same_moment(
        pair: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    started = time.monotonic()
    process, formation = launch(launched, pair, "--deadline", "8s")
    assert time.monotonic() - started < 8, "the formation came up after its deadline"
    _, err = process.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert process.returncode == 1, err.decode()
    # Said once, for the formation, by its entry member; no peer "stays down" at the end.
    assert err.decode().count("E-RUN-053") == 1, err.decode()
    assert "no task was running" in err.decode() and "stays down" not in err.decode()
    assert 7.5 < elapsed < 20, elapsed
    assert wait_gone(pids_of(formation).values(), 5) < 5
    ends = {}
    for name, trace in member_traces(paths.records_root()).items():
        events = events_of(trace)
        assert "deadline_reached" in events, (name, events)
        assert "formation_ended" not in events, (name, events)
        assert events[-1] == "session_end"
        ends[name] = next(r["ts"] for r in trace if r["event"] == "deadline_reached")
    assert set(ends) == {"planner", "coder"}
