"""Readiness failures (E-RUN-045), the deadline before the entry member starts (E-RUN-053)
and retention of formation directories, with real launcher processes and fake members
that speak the member contract (tests/support/formation.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.home import formations, paths, running_records
from launcher.ids import new_formation_id
from launcher.spawn.process import process_start_time
from tests.support.formation import (
    kill_group_quietly,
    launcher_env,
    simple_project,
    start_launcher,
    write_fake_member,
)

pytestmark = pytest.mark.integration

MEMBERS = ("planner", "coder", "reviewer")
REACH = {"planner": ["coder", "reviewer"], "reviewer": ["coder"]}


def fake_env(tmp_path: Path, modes: dict[str, str], **extra: str) -> dict[str, str]:
    return launcher_env(MURMUR_TEST_MEMBER_ARGV_PREFIX=write_fake_member(tmp_path),
                        FAKE_MEMBER_MODES=json.dumps(
                            {f"local/{name}": mode for name, mode in modes.items()}),
                        **extra)


def run(project: Path, env: dict[str, str], *args: str,
        timeout: float = 60) -> tuple[int, str, str, float]:
    start = time.monotonic()
    process = start_launcher(project, *args, env=env)
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        kill_group_quietly(process)
    return process.returncode, out.decode(), err.decode(), time.monotonic() - start


def formation_members_running(formation_id: str) -> list[int]:
    """Pids of processes whose environment places them in ``formation_id``."""
    marker = f"MURMUR_FORMATION_ID={formation_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def only_formation() -> str:
    (formation_id,) = os.listdir(paths.formations_root())
    return formation_id


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return simple_project(tmp_path, MEMBERS, entry="planner", reachability=REACH)


CASES = [
    ("exit_at_start", {}, "it exited with status 3 before it reported"),
    ("garbage_first", {}, "its first line on stdout is not a readiness line"),
    ("no_door", {}, "its readiness line reports no door"),
    ("other_formation", {}, "it reported formation frm_0190000000007000a000000000000000, "
                            "not frm_"),
    ("silent", {"MURMUR_TEST_READY_SECONDS": "2"}, "it did not report within 2 seconds of "
                                                    "its start"),
    ("exit_after_report", {}, "it exited with status 0 after it reported, before its door "
                              "answered"),
    ("dead_door", {"MURMUR_TEST_READY_SECONDS": "2"}, "its door at http://127.0.0.1:"),
]


@pytest.mark.parametrize(("mode", "extra", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_a_peer_that_does_not_come_up_refuses_the_launch(
        tmp_path: Path, project: Path, mode: str, extra: dict[str, str],
        fragment: str) -> None:
    env = fake_env(tmp_path, {"planner": "good", "coder": mode, "reviewer": "good"}, **extra)
    code, out, err, elapsed = run(project, env, "--json", "--task", "hello")
    assert code == 1, err
    assert f"error E-RUN-045: member `coder` did not become ready: {fragment}" in err
    assert "  hint: " in err
    if mode == "dead_door":
        assert "did not answer as session ses_" in err
    # No formation line, no result (the entry member never started): the one failure
    # object --json promises, naming the first error.
    [failure] = [json.loads(line) for line in out.splitlines()]
    assert failure["ok"] is False and failure["error"]["code"] == "E-RUN-045"
    assert not paths.workdir_records(project).exists()
    formation_id = only_formation()
    assert formation_members_running(formation_id) == []
    # The peer that did come up was wound down by its lifeline, not killed.
    reviewer_traces = list((formations.formation_records(formation_id) / "reviewer").rglob(
        "trace.jsonl"))
    assert reviewer_traces
    events = [json.loads(line)["event"] for line in reviewer_traces[0].read_text().split()]
    assert events[-2:] == ["formation_ended", "session_end"]
    assert running_records.list_running() == []
    assert elapsed < 20, f"the refused launch took {elapsed:.1f}s"


def test_deadline_while_waiting_for_doors_stops_everything_with_e_run_053(
        tmp_path: Path, project: Path) -> None:
    env = fake_env(tmp_path, {"planner": "good", "coder": "silent", "reviewer": "good"})
    code, out, err, elapsed = run(project, env, "--json", "--deadline", "2s",
                                  "--task", "hello")
    assert code == 1, err
    assert "error E-RUN-053: formation frm_" in err
    assert "reached its deadline" in err
    assert "E-RUN-045" not in err
    [failure] = [json.loads(line) for line in out.splitlines()]
    assert failure["error"]["code"] == "E-RUN-053"
    assert formation_members_running(only_formation()) == []
    assert 1.5 < elapsed < 15, elapsed


def test_no_peer_means_no_formation_directory(tmp_path: Path) -> None:
    project = simple_project(tmp_path, ["solo"], entry="solo")
    env = fake_env(tmp_path, {"solo": "good"})
    code, out, err, _ = run(project, env, "--json", "--task", "hi")
    assert code == 0, err
    line, result = out.splitlines()
    assert json.loads(line)["members"][0]["workdir"] == str(project.resolve())
    assert result == "fake result: hi"
    assert not paths.formations_root().exists()


# --------------------------------------------------------------------------- retention


@pytest.fixture
def live_process() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield child
    child.kill()
    child.wait()


def test_retention_keeps_max_sessions_of_the_projects_formations(
        tmp_path: Path, live_process: subprocess.Popen[bytes]) -> None:
    project = simple_project(tmp_path, ["planner", "coder"], entry="planner",
                             reachability={"planner": ["coder"]},
                             retain="{max_sessions: 2}")
    other = tmp_path / "elsewhere"
    other.mkdir()
    # Older directories that must survive: no marker, another project's, a live launcher's.
    no_marker = new_formation_id()
    formations.make_formation_dir(no_marker)
    foreign = new_formation_id()
    formations.make_formation_dir(foreign)
    formations.write_formation_marker(foreign, project_dir=other, launcher_pid=1,
                                   launcher_start="1")
    running = new_formation_id()
    formations.make_formation_dir(running)
    formations.write_formation_marker(running, project_dir=project, launcher_pid=live_process.pid,
                                   launcher_start=process_start_time(live_process.pid))
    env = fake_env(tmp_path, {"planner": "good", "coder": "good"})
    launched, errors = [], []
    for number in range(3):
        code, out, err, _ = run(project, env, "--json", "--task", f"task {number}")
        assert code == 0, err
        launched.append(json.loads(out.splitlines()[0])["formation_id"])
        errors.append(err)
    first = launched[0]
    assert "retention" not in errors[0] + errors[1]
    removal = f"[mur run] retention: removed formation {first} (max_sessions)"
    assert removal in errors[2].splitlines()
    assert not formations.formation_dir(first).exists()
    assert not formations.formation_records(first).exists()
    for kept in (*launched[1:], no_marker, foreign, running):
        assert formations.formation_dir(kept).exists(), kept
    assert (formations.formation_records(launched[1]) / "coder").is_dir()
