"""``mur run --roster --detach``: the formation starts in the background and the command
ends once every member is ready, printing the id (``--json``: the formation line); the
formation then serves ``mur send`` until ``mur stop``; a refused launch says why, exits
with its status and leaves nothing running and no log behind."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.ids import is_formation_id
from launcher.spawn.process import pid_alive
from tests.support.formation import ECHO_AGENT, launcher_env, mur, simple_project
from tests.support.member import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Path]:
    project = simple_project(tmp_path, ["front", "back"], entry="front",
                             reachability={"front": ["back"]},
                             agents={"front": ECHO_AGENT, "back": ECHO_AGENT})
    yield project
    mur("stop", "--project", str(project), env=launcher_env(MURMUR_HOME=str(murmur_home)))


def test_detach_prints_the_id_and_the_formation_serves_until_stopped(
        project: Path, murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    started = mur("run", "--roster", "--detach", env=env, cwd=project, timeout=120)
    assert started.returncode == 0, started.stderr
    formation = started.stdout.strip()
    assert is_formation_id(formation), started.stdout
    assert f"mur stop {formation}" in started.stderr
    listed = json.loads(mur("ps", "--json", env=env, cwd=project).stdout)
    [running] = [row for row in listed["formations"] if row["formation_id"] == formation]
    launcher_pid = int(running["launcher_pid"])
    answer = mur("send", formation, "ping", env=env, cwd=project)
    assert answer.returncode == 0 and "front: ping" in answer.stdout, answer.stderr
    log = murmur_home / "records" / "detached" / f"{formation}.log"
    assert log.is_file() and log.stat().st_mode & 0o077 == 0
    stopped = mur("stop", env=env, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    assert wait_for(lambda: not pid_alive(launcher_pid, None), timeout=20)


def test_detach_json_prints_the_formation_line_with_the_launcher(
        project: Path, murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    started = mur("run", "--roster", "--detach", "--json", env=env, cwd=project,
                  timeout=120)
    assert started.returncode == 0, started.stderr
    line = json.loads(started.stdout)
    assert line["event"] == "formation" and line["detached"] is True
    assert {member["name"] for member in line["members"]} == {"front", "back"}
    assert os.path.basename(line["launcher_log"]) == f"{line['formation_id']}.log"
    assert pid_alive(int(line["launcher_pid"]), None)


def test_a_refused_detached_launch_says_why_and_leaves_nothing(
        project: Path, murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    (project / "roster.yaml").write_text("version: 1\nmembers: []\n")
    refused = mur("run", "--roster", "--detach", env=env, cwd=project, timeout=60)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.count("error E-ROS-") == 1, refused.stderr  # echoed once
    as_json = mur("run", "--roster", "--detach", "--json", env=env, cwd=project, timeout=60)
    document = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and document["ok"] is False
    assert str(document["error"]["code"]).startswith("E-ROS-")
    assert list((murmur_home / "records" / "detached").iterdir()) == []
    assert json.loads(mur("ps", "--json", env=env).stdout)["formations"] == []


def test_detach_with_a_task_is_a_usage_error(project: Path, murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    refused = mur("run", "--roster", "--detach", "--task", "hi", env=env, cwd=project)
    assert refused.returncode == 2 and "mur send" in refused.stderr
