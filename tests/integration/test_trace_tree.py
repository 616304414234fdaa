"""One trace across members (docs/tracing.md), with real ``mur`` processes: every task
of a formation's run shares the entry task's trace, each callee's task is a child of
the caller's ``member_call`` span, and ``mur trace show <frm> --tree`` prints the tree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.formation import (
    PLANNER_AGENT,
    REVIEWER_AGENT,
    launcher_env,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
)

pytestmark = pytest.mark.integration

# The coder calls the tester: a tree three tasks deep.
CODER_CALLS_TESTER = """
async def run(task):
    tested = await (await task.call_member("tester", f"test {task.text}"))
    return f"code for <{task.text}> ({tested})"
"""
TESTER_AGENT = """
async def run(task):
    return "tests pass"
"""


@pytest.fixture
def ran(tmp_path: Path, murmur_home: Path) -> tuple[str, dict[str, str]]:
    project = simple_project(
        tmp_path, ["planner", "coder", "reviewer", "tester"], entry="planner",
        reachability={"planner": ["coder", "reviewer"], "coder": ["tester"]},
        agents={"planner": PLANNER_AGENT, "coder": CODER_CALLS_TESTER,
                "reviewer": REVIEWER_AGENT, "tester": TESTER_AGENT})
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    process = start_launcher(project, "--json", "--task", "ship it", env=env)
    line = read_formation_line(process, timeout=90)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode()
    return line["formation_id"], env


def _records(formation_id: str, env: dict[str, str]) -> list[dict[str, Any]]:
    done = mur("trace", "show", formation_id, "--json", env=env)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_every_task_of_a_run_is_in_one_trace_linked_by_call_spans(
        ran: tuple[str, dict[str, str]]) -> None:
    records = _records(*ran)
    received = {r["member"]: r for r in records if r["event"] == "a2a_task_received"}
    calls = {(r["member"], r["callee"]): r for r in records if r["event"] == "member_call"}
    assert set(received) == {"planner", "coder", "reviewer", "tester"}
    assert set(calls) == {("planner", "coder"), ("planner", "reviewer"), ("coder", "tester")}
    assert len({r["trace_id"] for r in [*received.values(), *calls.values()]}) == 1
    assert received["planner"]["parent_span_id"] is None      # the operator's --task
    for (caller, callee), call in calls.items():
        assert call["parent_span_id"] == received[caller]["span_id"]
        assert received[callee]["parent_span_id"] == call["span_id"]
        assert call["callee_task_id"] == received[callee]["task_id"]


def test_trace_show_tree_prints_who_called_whom_how_long_and_how_it_ended(
        ran: tuple[str, dict[str, str]]) -> None:
    formation_id, env = ran
    done = mur("trace", "show", formation_id, "--tree", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"formation {formation_id}: 4 tasks, 3 calls"
    assert lines[1].startswith("planner  task ") and " from operator  completed in " in lines[1]
    assert lines[2].startswith("├─ → coder  task ") and "completed in" in lines[2]
    assert lines[3].startswith("│  └─ → tester  task ") and "completed in" in lines[3]
    assert lines[4].startswith("└─ → reviewer  task ") and "completed in" in lines[4]
    assert len(lines) == 5
    as_json = mur("trace", "show", formation_id, "--tree", "--json", env=env)
    [root] = json.loads(as_json.stdout)
    assert root["member"] == "planner" and root["state"] == "TASK_STATE_COMPLETED"
    coder = root["calls"][0]["task"]
    assert coder["member"] == "coder" and coder["calls"][0]["task"]["member"] == "tester"
    assert coder["seconds"] >= coder["calls"][0]["task"]["seconds"] >= 0
