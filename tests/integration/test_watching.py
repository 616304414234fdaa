"""Watching a running formation with real ``mur`` processes: ``mur ps`` shows each
member's live tasks by state, and ``mur trace show <frm> --follow`` prints the records
as they happen (through ``murmur.WatchSession``), each once, until the formation ends."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.formation import (
    formation_members,
    kill_group_quietly,
    launcher_env,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
)

pytestmark = pytest.mark.integration

PLANNER = """
async def run(task):
    return await (await task.call_member("coder", task.text))
"""
# Long enough for the test to look at the formation while both tasks work; bounded.
SLOW_CODER = """
import asyncio

async def run(task):
    await asyncio.sleep(6)
    return "done: " + task.text
"""


def _wait_for_working_coder(formation_id: str, env: dict[str, str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        members = formation_members(formation_id, env)
        if members.get("coder", {}).get("tasks", {}).get("live") == 1:
            return members
        time.sleep(0.2)
    raise AssertionError(f"the coder never held a task: {members}")


def test_ps_shows_live_tasks_and_trace_follow_prints_records_as_they_happen(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["planner", "coder"], entry="planner",
                             reachability={"planner": ["coder"]},
                             agents={"planner": PLANNER, "coder": SLOW_CODER})
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    launcher = start_launcher(project, "--json", "--task", "ship it", env=env)
    follower: subprocess.Popen[str] | None = None
    try:
        formation_id = read_formation_line(launcher, timeout=90)["formation_id"]
        members = _wait_for_working_coder(formation_id, env)
        working = {"live": 1, "states": {"TASK_STATE_WORKING": 1}}
        assert members["planner"]["tasks"] == members["coder"]["tasks"] == working
        table = mur("ps", env=env).stdout
        assert "TASKS" in table.splitlines()[1]
        assert "1 (1 working)" in table

        follower = subprocess.Popen(
            [sys.executable, "-m", "launcher.cli", "trace", "show", formation_id,
             "--follow", "--json"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        _, err = launcher.communicate(timeout=90)
        assert launcher.returncode == 0, err.decode()
        out, err_text = follower.communicate(timeout=60)
        assert follower.returncode == 0, err_text
    finally:
        kill_group_quietly(launcher)
        if follower is not None and follower.poll() is None:
            follower.kill()
    records = [json.loads(line) for line in out.splitlines()]
    received = [(r["member"], r["task_id"]) for r in records
                if r["event"] == "a2a_task_received"]
    assert sorted(member for member, _ in received) == ["coder", "planner"]
    ended = [(r["member"], r["state"]) for r in records if r["event"] == "task_state"
             and r["state"] == "TASK_STATE_COMPLETED"]
    # Both tasks ended after the follower started: those records came from the doors.
    assert sorted(ended) == [("coder", "TASK_STATE_COMPLETED"),
                             ("planner", "TASK_STATE_COMPLETED")]
    keys = [json.dumps({k: v for k, v in r.items() if k != "ts"}, sort_keys=True)
            for r in records]
    assert len(keys) == len(set(keys)), "a record was printed twice"
    after = mur("ps", "--json", env=env)
    assert json.loads(after.stdout)["formations"] == []
