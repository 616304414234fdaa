"""``mur logs`` of a whole formation after it ended: every member's printed lines in
time order behind its name, one member's alone when named, and a name that is no member
refused with the members it has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.formation import launcher_env, mur, simple_project

pytestmark = pytest.mark.integration

PLANNER = """
async def run(task):
    print("planner asks the coder")
    return await (await task.call_member("coder", task.text))
"""
CODER = """
import sys


async def run(task):
    print(f"coder works on {task.text}", file=sys.stderr)
    return f"coded {task.text}"
"""


def test_mur_logs_shows_each_members_output_and_filters_by_member(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["planner", "coder"], entry="planner",
                             reachability={"planner": ["coder"]},
                             agents={"planner": PLANNER, "coder": CODER})
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    done = mur("run", "--roster", "--project", str(project), "--json", "--task", "parser",
               env=env, cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    formation = json.loads(done.stdout.split("\n", 1)[0])["formation_id"]
    every = mur("logs", formation, env=env)
    assert every.returncode == 0, every.stderr
    lines = every.stdout.splitlines()
    asks = lines.index("[planner] planner asks the coder")
    assert lines.index("[coder] coder works on parser") > asks
    one = mur("logs", formation, "coder", env=env)
    assert one.stdout.splitlines() == ["[coder] coder works on parser"], one.stdout
    stranger = mur("logs", formation, "reviewer", env=env)
    assert stranger.returncode == 2
    assert "no member 'reviewer'; its members: coder, planner" in stranger.stderr


SLOW_TO_IMPORT = """
import time

time.sleep(4.5)   # a large model or library loading


async def run(task):
    return "slow but here"
"""


def test_a_member_slow_to_come_up_is_named_while_the_launcher_waits(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["planner", "slow"], entry="planner",
                             reachability={"planner": ["slow"]},
                             agents={"planner": PLANNER.replace("coder", "slow"),
                                     "slow": SLOW_TO_IMPORT})
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    done = mur("run", "--roster", "--project", str(project), "--task", "x",
               env=env, cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "slow but here"
    assert "mur run: waiting for slow to come up (3 s so far)" in done.stderr, done.stderr
