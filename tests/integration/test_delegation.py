"""Delegation to child capsules with real processes (docs/delegation.md): a member that
delegates, standalone and in a formation; the child's answer in the parent's task and its
turn; the child's inheritance (the formation id and nothing else), its door refusing a
valid formation token with 401, no W-RUN-007; the parent killed with SIGKILL and the
child gone; the refusals (not allowed, max_children, max_depth)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.home.running_records import RunningRecord, list_live
from launcher.home.trace import read_trace
from launcher.spawn.process import pid_alive
from tests.support.member import (
    Channel,
    Project,
    new_formation,
    project_fixture,
    read_ready,
    wait_for,
)

pytestmark = pytest.mark.integration

project = pytest.fixture(project_fixture)

#: A child that reports what it inherited, then waits for ``release`` in its work folder.
WAITING_CHILD = """
import asyncio, json

async def run(task):
    await task.status("reading")
    while not (task.workdir / "release").exists():
        await asyncio.sleep(0.05)
    await task.artifact("summary of: " + task.text, name="summary")
    return json.dumps({"formation_id": task.formation_id, "member": task.member})
"""

#: A parent that delegates, then answers on its second turn with the fenced replies.
PARENT = """
async def run(task):
    if task.turn == 1:
        await task.delegate("local/summarizer", "the text to summarize")
        return None
    return "parent saw:\\n" + task.replies
"""


def _child_record(home: Path, parent_session: str, timeout: float = 30.0) -> RunningRecord:
    def found() -> RunningRecord | None:
        for record in list_live():
            if record.parent_session == parent_session:
                return record
        return None
    record: RunningRecord = wait_for(found, timeout=timeout)
    return record


def _session_start(records_dir: str) -> dict[str, Any]:
    starts = [r for r in read_trace(Path(records_dir) / "trace.jsonl")
              if r["event"] == "session_start"]
    return starts[0]


@pytest.fixture
def capsules(project: Project) -> Project:
    project.capsule("summarizer", authentication=None, agent=WAITING_CHILD)
    project.capsule("boss", authentication=None, agent=PARENT,
                    spawn="{allow: [local/summarizer]}")
    return project


def test_a_member_in_a_formation_delegates_and_the_child_answers_into_its_task(
        capsules: Project, tmp_path: Path) -> None:
    formation_id, key = new_formation()
    channel = Channel(formation_id, key, "boss", entry=True)
    process = capsules.start("boss", "--task", "summarize", channel=channel)
    channel.send_credentials()
    boss = read_ready(process)
    capsules.members.append(boss)
    child = _child_record(capsules.home, boss.ready["session_id"])
    # Its door serves once its --task is on it.
    wait_for(lambda: any(r["event"] == "a2a_task_received" for r in read_trace(
        Path(str(child.records_dir)) / "trace.jsonl")), timeout=30.0)

    start = _session_start(str(child.records_dir))
    assert start["formation_id"] == formation_id, "the child inherits the formation id"
    assert "formation_member" not in start and "formation_callees" not in start
    assert start["parent_session"] == boss.ready["session_id"]
    assert start["delegated_by"] == "boss"
    assert start["delegation_depth"] == 1

    # A valid formation token of the parent's formation: the child's door is in no
    # formation, so it refuses it as it refuses any token it cannot verify.
    token = key.mint(formation=formation_id, caller="boss", callee="summarizer")
    refused = httpx.post(str(child.door_url) + "/", timeout=10.0, headers={
        "Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}})
    assert refused.status_code == 401, refused.text

    # The child's status messages stream into the parent's task.
    def parent_status() -> str:
        task = boss.rpc("GetTask", {"id": boss.ready["task_id"]})["result"]
        message = task["status"].get("message") or {"parts": []}
        return "".join(part.get("text", "") for part in message["parts"])
    wait_for(lambda: parent_status() == "child:summarizer: reading", timeout=15.0)

    # mur ps: the child under the session that delegated to it.
    listed = capsules.mur("ps", "--json")
    assert listed.returncode == 0, listed.stderr
    formation = next(f for f in json.loads(listed.stdout)["formations"]
                     if f["formation_id"] == formation_id)
    [row] = formation["members"]
    assert row["session_id"] == boss.ready["session_id"]
    assert [c["session_id"] for c in row["children"]] == [child.id]
    shown = capsules.mur("ps")
    assert "└ child:summarizer  " in shown.stdout, shown.stdout

    (capsules.path / "release").write_text("go")
    assert boss.wait(60) == 0, boss.stderr
    assert "W-RUN-007" not in boss.stderr, "a delegated child prints no W-RUN-007"
    answer = boss.stdout
    # The child's answer fenced in the parent's second turn; the parent's answer is its
    # own (the child's artifacts are not copied into it).
    assert answer.startswith("parent saw:\n```child:summarizer\n"), answer
    fenced = answer.split("```child:summarizer\n", 1)[1].split("```")[0].splitlines()
    assert fenced[0] == "summary of: the text to summarize"
    assert json.loads(fenced[1]) == {"formation_id": formation_id, "member": None}

    delegations = [r for r in boss.trace() if r["event"] == "delegation"]
    assert len(delegations) == 1
    assert delegations[0]["outcome"] == "completed"
    assert delegations[0]["child_session"] == child.id
    assert delegations[0]["capsule"] == "local/summarizer"
    child_events = [r["event"] for r in read_trace(Path(str(child.records_dir)) /
                                                    "trace.jsonl")]
    assert child_events[-1] == "session_end"

    # The trace tree and the graph show the delegation, with the child's own task.
    tree = capsules.mur("trace", "show", boss.ready["session_id"], "--tree")
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[0].endswith("2 tasks, 1 call"), tree.stdout
    assert "└─ → delegated child:summarizer  task " in lines[2], tree.stdout
    assert "completed in" in lines[2]
    graph = capsules.mur("graph", formation_id, "--format", "dot")
    assert graph.returncode == 0, graph.stderr
    assert '"boss" -> "child:summarizer" [label="1 delegation"];' in graph.stdout
    assert '"boss" [label="boss (entry) · 1 task", style=bold];' in graph.stdout


def test_the_parent_killed_with_sigkill_leaves_no_child_running(capsules: Project) -> None:
    boss = capsules.run("boss", "--task", "summarize")
    child = _child_record(capsules.home, boss.ready["session_id"])
    boss.process.send_signal(signal.SIGKILL)
    boss.process.wait(10)
    # The reference's times: the child winds down on its spawner lifeline, exiting within
    # 20 seconds (143 at the latest), so nothing of the formation is left after 30.
    wait_for(lambda: not pid_alive(child.pid, child.start), timeout=30.0)
    events = [r["event"] for r in read_trace(Path(str(child.records_dir)) / "trace.jsonl")]
    assert "spawner_ended" in events
    assert "formation_ended" not in events
    assert events[-1] == "session_end"


BOUNDED_PARENT = """
import json

async def run(task):
    out = {}
    try:
        await task.delegate("local/stranger", "x")
    except RuntimeError as refused:
        out["not_allowed"] = str(refused)
    first = await task.delegate("local/middle", "go deeper")
    try:
        await task.delegate("local/middle", "again")
    except RuntimeError as refused:
        out["max_children"] = str(refused)
    out["middle"] = await first
    return json.dumps(out)
"""

MIDDLE = """
async def run(task):
    try:
        child = await task.delegate("local/leaf", "x")
    except RuntimeError as refused:
        return "refused: " + str(refused)
    return "delegated: " + await child
"""


def test_delegations_past_the_grant_max_children_and_max_depth_are_refused(
        project: Project) -> None:
    project.capsule("leaf", authentication=None)
    project.capsule("middle", authentication=None, agent=MIDDLE,
                    spawn="{allow: [local/leaf]}")
    project.capsule("boss", authentication=None, agent=BOUNDED_PARENT,
                    spawn="{allow: [local/middle], max_children: 1, max_depth: 1}")
    boss = project.run("boss", "--task", "go")
    assert boss.wait(90) == 0, boss.stderr
    told = json.loads(boss.stdout.strip().splitlines()[-1])
    assert "(not_allowed)" in told["not_allowed"]
    assert "local/stranger" in told["not_allowed"]
    assert "(max_children)" in told["max_children"]
    assert told["middle"].startswith("refused: delegation to local/leaf refused (max_depth)")
    outcomes = [r["outcome"] for r in boss.trace() if r["event"] == "delegation"]
    assert outcomes == ["completed"], "refusals before a child started record nothing"


def test_a_child_that_fails_answers_with_its_failure(project: Project) -> None:
    project.capsule("broken", authentication=None,
                    agent="async def run(task):\n    raise ValueError('no summary today')\n")
    project.capsule("boss", authentication=None, spawn="{allow: [local/broken]}", agent="""
async def run(task):
    child = await task.delegate("local/broken", "x")
    try:
        return await child
    except Exception as failure:
        return f"{type(failure).__name__}: {failure}"
""")
    boss = project.run("boss", "--task", "go")
    assert boss.wait(90) == 0, boss.stderr
    assert boss.stdout.startswith("CallFailed: call to member 'child:broken' failed: "
                                  "TASK_STATE_FAILED"), boss.stdout
    assert "no summary today" in boss.stdout
    outcomes = [r["outcome"] for r in boss.trace() if r["event"] == "delegation"]
    assert outcomes == ["failed"]
