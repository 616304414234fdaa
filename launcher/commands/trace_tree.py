"""The call tree of a formation's trace (``mur trace show <frm> --tree``).

Built from the merged records of every member (``launcher.home.trace.merge_traces``), in
this order:

1. every ``a2a_task_received`` is a task, at its member, with its span;
2. ``task_state`` records give each task its last state and, once it ended, its
   duration (from the task's received record to its terminal state);
3. every ``member_call`` is a call of the task named by its ``task_id`` at the calling
   member; the callee's task is the one whose ``parent_span_id`` is the call's
   ``span_id`` (the W3C trace context the proxy sent), else the one its
   ``callee_task_id`` names; every ``delegation`` is a call too (``via: delegation``),
   to the child's task at ``child:<capsule-name>`` (the child's trace is merged under
   that name);
4. a model member's ``model_call`` and ``tool_call`` records are steps of the task
   their ``task_id`` names, shown among its calls in time order;
5. a task that is no call's child is a root (the operator's, a client's, or a caller
   outside the formation); roots and calls keep time order.

Records from before trace context (no span ids) still form a tree: their tasks are
roots and their calls name their callee's task only when the record does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gateway.protocol import TERMINAL_STATES, state_word
from launcher.spawn.process import escape_control

__all__ = ["CallNode", "TaskNode", "build_tree", "render_tree", "tree_json"]

Record = dict[str, Any]
#: The records that are steps of a task rather than tasks or calls (a model member's).
STEP_EVENTS = frozenset({"model_call", "tool_call"})


@dataclass
class TaskNode:
    """One task a member's door received."""

    member: str
    task_id: str
    caller: str
    received: str
    span_id: str | None = None
    parent_span_id: str | None = None
    trace_id: str | None = None
    state: str = "TASK_STATE_SUBMITTED"
    ended: str | None = None
    calls: list[CallNode] = field(default_factory=list)
    #: A model member's requests to its endpoint and its tool runs (step 4).
    steps: list[Record] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        """How long the task took, ``None`` while it has not ended."""
        if self.ended is None:
            return None
        start, end = _moment(self.received), _moment(self.ended)
        return None if start is None or end is None else (end - start).total_seconds()


@dataclass
class CallNode:
    """One call a task made to a member: its callee's task, when one was found."""

    caller: str
    callee: str
    at: str
    span_id: str | None
    outcome: str | None
    via: str | None
    callee_task_id: str | None
    task: TaskNode | None = None


def _moment(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def _text(record: Record, key: str) -> str | None:
    value = record.get(key)
    return value if isinstance(value, str) and value else None


def _task(record: Record) -> TaskNode | None:
    task_id = _text(record, "task_id")
    if task_id is None:
        return None
    caller = _text(record, "formation_member") or _text(record, "credential") or "-"
    return TaskNode(member=str(record.get("member") or "-"), task_id=task_id,
                    caller=caller, received=str(record.get("ts") or ""),
                    span_id=_text(record, "span_id"),
                    parent_span_id=_text(record, "parent_span_id"),
                    trace_id=_text(record, "trace_id"))


def _call(record: Record) -> CallNode:
    return CallNode(caller=str(record.get("member") or "-"),
                    callee=str(record.get("callee") or "-"), at=str(record.get("ts") or ""),
                    span_id=_text(record, "span_id"), outcome=_text(record, "outcome"),
                    via=_text(record, "via"), callee_task_id=_text(record, "callee_task_id"))


def _delegation(record: Record) -> CallNode:
    capsule = str(record.get("capsule") or "-")
    outcome = _text(record, "outcome")
    return CallNode(caller=str(record.get("member") or "-"),
                    callee=f"child:{capsule.rsplit('/', 1)[-1]}", at=str(record.get("ts") or ""),
                    span_id=None, outcome=None if outcome == "completed" else outcome,
                    via="delegation", callee_task_id=_text(record, "child_task_id"))


def build_tree(records: Iterable[Record]) -> list[TaskNode]:
    """The root tasks of ``records`` (merged, in time order), each with its calls."""
    tasks: dict[tuple[str, str], TaskNode] = {}
    calls: list[tuple[str | None, CallNode]] = []
    steps: list[Record] = []
    for record in records:
        event = record.get("event")
        if event == "a2a_task_received":
            node = _task(record)
            if node is not None:
                tasks.setdefault((node.member, node.task_id), node)
        elif event == "task_state":
            _note_state(tasks, record)
        elif event == "member_call":
            calls.append((_text(record, "task_id"), _call(record)))
        elif event == "member_call_refused":
            refused = _call(record)
            refused.outcome = "refused: no edge"
            calls.append((_text(record, "task_id"), refused))
        elif event == "delegation":
            calls.append((_text(record, "task_id"), _delegation(record)))
        elif event in STEP_EVENTS:
            steps.append(record)
    for record in steps:
        owner = tasks.get((str(record.get("member") or "-"), str(record.get("task_id") or "")))
        if owner is not None:
            owner.steps.append(record)
    by_parent = {node.parent_span_id: node for node in tasks.values() if node.parent_span_id}
    children: set[int] = set()
    for task_id, call in calls:
        task = _callee_task(call, tasks, by_parent)
        if task is not None and id(task) not in children:   # one parent each: no cycles
            call.task = task
            children.add(id(task))
        parent = tasks.get((call.caller, task_id or ""))
        if parent is not None:
            parent.calls.append(call)
    return [node for node in tasks.values() if id(node) not in children]


def _note_state(tasks: dict[tuple[str, str], TaskNode], record: Record) -> None:
    node = tasks.get((str(record.get("member") or "-"), str(record.get("task_id") or "")))
    state = _text(record, "state")
    if node is None or state is None:
        return
    node.state = state
    if state in TERMINAL_STATES:
        node.ended = str(record.get("ts") or "")


def _callee_task(call: CallNode, tasks: dict[tuple[str, str], TaskNode],
                 by_parent: dict[str, TaskNode]) -> TaskNode | None:
    if call.span_id is not None:
        node = by_parent.get(call.span_id)
        if node is not None and node.member == call.callee:
            return node
    if call.callee_task_id is not None:
        return tasks.get((call.callee, call.callee_task_id))
    return None


# ------------------------------------------------------------------------ rendering


def _how_long(node: TaskNode) -> str:
    seconds = node.seconds
    if seconds is None:
        return f"{state_word(node.state)}, not ended"
    return f"{state_word(node.state)} in {seconds:.2f}s"


def _task_line(node: TaskNode, *, called: bool) -> str:
    # Names come from trace files, which anyone who can write them can forge: a control
    # character would rewrite the operator's terminal.
    whom = "" if called else f"  from {escape_control(node.caller)}"
    return (f"{escape_control(node.member)}  task {escape_control(node.task_id)}{whom}  "
            f"{escape_control(_how_long(node))}")


def _call_line(call: CallNode) -> str:
    if call.task is not None:
        how = "delegated " if call.via == "delegation" else ""
        return f"→ {how}{_task_line(call.task, called=True)}"
    how = call.outcome or ("http request" if call.via == "http" else "no task seen")
    return f"→ {escape_control(call.callee)}  (no task: {escape_control(how)})"


def _step_line(step: Record) -> str:
    """A model request (``model gpt-4o-mini turn 2: 812+64 tokens, 930 ms → call_member``)
    or a tool run (``tool word_count: ok, 12 ms``)."""
    if step.get("event") == "model_call":
        tools = step.get("tools") or []
        asked = (" → " + ", ".join(str(tool) for tool in tools)) if tools else ""
        line = (f"model {step.get('model', '-')} turn {step.get('turn', '-')}: "
                f"{step.get('input_tokens', 0)}+{step.get('output_tokens', 0)} tokens, "
                f"{step.get('latency_ms', 0)} ms{asked}")
    else:
        line = (f"tool {step.get('tool', '-')}: {step.get('outcome', '-')}, "
                f"{step.get('duration_ms', 0)} ms")
    return "· " + escape_control(line)


def _lines(node: TaskNode, prefix: str) -> list[str]:
    entries: list[tuple[str, CallNode | Record]] = [(call.at, call) for call in node.calls]
    entries += [(str(step.get("ts") or ""), step) for step in node.steps]
    entries.sort(key=lambda entry: entry[0])
    lines: list[str] = []
    for index, (_at, entry) in enumerate(entries):
        last = index == len(entries) - 1
        branch = prefix + ("└─ " if last else "├─ ")
        if not isinstance(entry, CallNode):
            lines.append(branch + _step_line(entry))
            continue
        lines.append(branch + _call_line(entry))
        if entry.task is not None:
            lines += _lines(entry.task, prefix + ("   " if last else "│  "))
    return lines


def render_tree(roots: list[TaskNode], title: str) -> str:
    """The tree for people: each root task, then its calls indented under it."""
    tasks = _count_tasks(roots)
    calls = sum(_count_calls(root) for root in roots)
    out = [f"{title}: {tasks} task{'s' * (tasks != 1)}, {calls} call{'s' * (calls != 1)}"]
    for root in roots:
        out.append(_task_line(root, called=False))
        out += _lines(root, "")
    return "\n".join(out) + "\n"


def _walk(node: TaskNode) -> Iterable[TaskNode]:
    yield node
    for call in node.calls:
        if call.task is not None:
            yield from _walk(call.task)


def _count_tasks(roots: list[TaskNode]) -> int:
    return sum(1 for root in roots for _ in _walk(root))


def _count_calls(root: TaskNode) -> int:
    return sum(len(node.calls) for node in _walk(root))


def tree_json(node: TaskNode) -> dict[str, Any]:
    """A task and everything under it, for ``--json``."""
    return {
        "member": node.member, "task_id": node.task_id, "caller": node.caller,
        "state": node.state, "received": node.received, "ended": node.ended,
        "seconds": node.seconds, "trace_id": node.trace_id, "span_id": node.span_id,
        "parent_span_id": node.parent_span_id,
        "calls": [{"callee": call.callee, "at": call.at, "span_id": call.span_id,
                   "outcome": call.outcome, "via": call.via,
                   "callee_task_id": call.callee_task_id,
                   "task": None if call.task is None else tree_json(call.task)}
                  for call in node.calls],
        "steps": [{key: value for key, value in step.items() if key not in ("member",)}
                  for step in node.steps],
    }
