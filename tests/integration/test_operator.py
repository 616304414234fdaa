"""The operator's commands against real ``mur run`` processes: a standalone session
(``mur ps``, ``mur send`` by session id and by door URL, ``mur trace show``, ``mur stop``)
and ``mur stop <formation>`` reaching a member started by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.home import running_records
from tests.support.formation import (
    ECHO_AGENT,
    install_capsule,
    kill_group_quietly,
    launcher_env,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
    wait_gone,
    write_capsule,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        kill_group_quietly(process)
        process.wait()


def start_session(project: Path, name: str, processes: list[subprocess.Popen[bytes]],
                  env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes],
                                                              dict[str, Any]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "run", "--capsule", f"local/{name}",
         "--capsule-version", "1.0.0", "--project", str(project), "--json"],
        cwd=project, env=env or launcher_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)
    processes.append(process)
    assert process.stdout is not None
    line = process.stdout.readline()
    ready: dict[str, Any] = json.loads(line)
    assert ready["event"] == "ready", line
    return process, ready


def test_operator_commands_on_a_standalone_session(
        tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    install_capsule(project, write_capsule(tmp_path, "echo", ECHO_AGENT))
    process, ready = start_session(project, "echo", processes)
    session = ready["session_id"]

    listed = json.loads(mur("ps", "--json").stdout)
    assert listed["formations"] == []
    (row,) = listed["sessions"]
    assert (row["session_id"], row["pid"], row["door_url"]) == (
        session, process.pid, ready["door_url"])

    by_id = mur("send", session, "first")
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout == "None: first\n"  # the echo agent: `{task.member}: {task.text}`
    by_url = mur("send", ready["door_url"], "second", "--json")
    assert by_url.returncode == 0, by_url.stderr
    assert json.loads(by_url.stdout)["status"]["state"] == "TASK_STATE_COMPLETED"

    shown = mur("trace", "show", session)
    assert shown.returncode == 0, shown.stderr
    assert "session_start" in shown.stdout
    assert shown.stdout.count("a2a_task_received") == 2

    stopped = mur("stop", session)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout == f"stopped session {session}\n"
    assert process.wait(10) == 0
    assert mur("stop", session).returncode == 1
    assert mur("send", session, "third").returncode == 1
    assert "is not running" in mur("send", session, "third").stderr


def test_mur_stop_of_a_formation_also_stops_a_member_started_by_hand(
        tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    project = simple_project(tmp_path, ["planner", "coder"], entry="planner")
    launcher = start_launcher(project, "--json")
    processes.append(launcher)
    formation = read_formation_line(launcher, timeout=90)
    fid = formation["formation_id"]
    by_hand, ready = start_session(project, "coder", processes,
                                   env=launcher_env(MURMUR_FORMATION_ID=fid))
    assert ready.get("formation_id") in (None, fid)
    listed = json.loads(mur("ps", "--json").stdout)
    (running,) = listed["formations"]
    assert ready["session_id"] in {m["session_id"] for m in running["members"]}

    stopped = mur("stop", fid)
    assert stopped.returncode == 0, stopped.stderr
    assert launcher.wait(10) == 0
    assert by_hand.wait(10) == 0
    assert wait_gone([m["pid"] for m in formation["members"]], 5) < 5
    assert running_records.list_live() == []
