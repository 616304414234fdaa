"""launcher.commands.trace_tree and launcher.commands.live_tasks on synthetic records: the
links, what a forged trace cannot do to the tree or the terminal, and live task
counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.commands.live_tasks import live_tasks, render_tasks
from launcher.commands.trace_tree import build_tree, render_tree, tree_json


def received(member: str, task: str, span: str, parent: str | None = None,
             ts: str = "2026-12-03T10:00:00.000Z", caller: str = "operator") -> dict[str, Any]:
    return {"ts": ts, "event": "a2a_task_received", "member": member, "task_id": task,
            "credential": caller, "trace_id": "t" * 32, "span_id": span,
            "parent_span_id": parent}


def state(member: str, task: str, value: str, ts: str) -> dict[str, Any]:
    return {"ts": ts, "event": "task_state", "member": member, "task_id": task,
            "state": f"TASK_STATE_{value}"}


def call(member: str, task: str, callee: str, span: str, **extra: Any) -> dict[str, Any]:
    return {"ts": "2026-12-03T10:00:00.100Z", "event": "member_call", "member": member,
            "task_id": task, "callee": callee, "span_id": span, **extra}


def test_a_callee_task_hangs_under_the_call_whose_span_is_its_parent() -> None:
    records = [
        received("planner", "p1", "a" * 16),
        call("planner", "p1", "coder", "b" * 16),
        received("coder", "c1", "c" * 16, parent="b" * 16, caller="coder-token",
                 ts="2026-12-03T10:00:00.100Z"),
        call("planner", "p1", "reviewer", "d" * 16, outcome="refused"),
        state("coder", "c1", "COMPLETED", "2026-12-03T10:00:00.600Z"),
        state("planner", "p1", "FAILED", "2026-12-03T10:00:01.500Z"),
    ]
    [root] = build_tree(records)
    assert root.member == "planner" and root.seconds == 1.5
    assert [c.callee for c in root.calls] == ["coder", "reviewer"]
    assert root.calls[0].task is not None and root.calls[0].task.task_id == "c1"
    assert root.calls[1].task is None
    text = render_tree([root], "formation f")
    assert text.splitlines() == [
        "formation f: 2 tasks, 2 calls",
        "planner  task p1  from operator  failed in 1.50s",
        "├─ → coder  task c1  completed in 0.50s",
        "└─ → reviewer  (no task: refused)",
    ]
    assert json.loads(json.dumps(tree_json(root)))["calls"][0]["task"]["seconds"] == 0.5


def test_a_forged_cycle_of_calls_cannot_loop_the_tree() -> None:
    # Two tasks each claiming the other's call as parent: neither is anyone's root, and
    # nothing recurses forever.
    records = [
        received("a", "a1", "1" * 16, parent="4" * 16),
        call("a", "a1", "b", "2" * 16),
        received("b", "b1", "3" * 16, parent="2" * 16),
        call("b", "b1", "a", "4" * 16),
        received("root", "r1", "5" * 16),
        call("root", "r1", "b", "2" * 16),   # a second call claiming the same span
    ]
    roots = build_tree(records)
    assert [root.task_id for root in roots] == ["r1"]
    text = render_tree(roots, "formation f")
    assert text.count("task b1") <= 1 and len(text.splitlines()) == 3


def test_a_forged_name_cannot_write_control_characters_to_the_terminal() -> None:
    records = [received("evil\x1b[2J", "p1\x07", "a" * 16, caller="x\x1b]0;pwned\x07")]
    text = render_tree(build_tree(records), "formation f")
    assert "\x1b" not in text and "\x07" not in text


def test_live_tasks_counts_what_has_not_ended(tmp_path: Path) -> None:
    lines = [state("m", "t1", "SUBMITTED", "1"), state("m", "t1", "WORKING", "2"),
             state("m", "t2", "SUBMITTED", "3"), state("m", "t2", "COMPLETED", "4"),
             state("m", "t3", "INPUT_REQUIRED", "5")]
    (tmp_path / "trace.jsonl").write_text(
        "\n".join(json.dumps(line) for line in lines) + "\n{torn")
    tasks = live_tasks(str(tmp_path))
    assert tasks == {"live": 2, "states": {"TASK_STATE_INPUT_REQUIRED": 1,
                                           "TASK_STATE_WORKING": 1}}
    assert render_tasks(tasks) == "2 (1 input-required, 1 working)"
    assert live_tasks(str(tmp_path / "missing")) == {"live": 0, "states": {}}
    assert render_tasks(live_tasks(None)) == "0"


def test_a_delegation_hangs_the_childs_task_under_the_parents_task() -> None:
    records = [
        received("-", "p1", "a" * 16),
        received("child:summarizer", "c1", "c" * 16, ts="2026-12-03T10:00:00.200Z"),
        state("child:summarizer", "c1", "COMPLETED", "2026-12-03T10:00:00.400Z"),
        {"ts": "2026-12-03T10:00:00.450Z", "event": "delegation", "member": "-",
         "task_id": "p1", "capsule": "local/summarizer", "version": "1.0.0",
         "child_session": "ses_x", "child_task_id": "c1", "outcome": "completed"},
        {"ts": "2026-12-03T10:00:00.460Z", "event": "delegation", "member": "-",
         "task_id": "p1", "capsule": "local/leaf", "version": "1.0.0",
         "outcome": "refused"},
        state("-", "p1", "COMPLETED", "2026-12-03T10:00:01.000Z"),
    ]
    [root] = build_tree(records)
    assert [call.via for call in root.calls] == ["delegation", "delegation"]
    assert root.calls[0].task is not None and root.calls[0].task.task_id == "c1"
    assert render_tree([root], "session s").splitlines() == [
        "session s: 2 tasks, 2 calls",
        "-  task p1  from operator  completed in 1.00s",
        "├─ → delegated child:summarizer  task c1  completed in 0.20s",
        "└─ → child:leaf  (no task: refused)",
    ]
