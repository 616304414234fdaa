"""``mur approve``, ``mur deny`` and ``mur approvals``: the operator in front of an edge
with ``approve: true`` (a version 2 roster, docs/bounds.md).

In order: parsing (:func:`register`); how a formation member's door is found (its live
session, :func:`member_door`); one operator-only call at a door
(:func:`operator_call`); then the three commands. A call along an approved edge waits at
the callee's door in ``TASK_STATE_AUTH_REQUIRED``; ``mur approvals <frm>`` lists every
such task across the formation (without ``<frm>``, the one running), ``mur approve <frm>
<member> <task-id>`` lets one run (a unique start of the task id will do: it is made
whole from the tasks waiting there) and ``mur deny ... --reason TEXT`` rejects it.
Nothing here prints a token.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from launcher.commands.common import Fail, failer, live_records
from launcher.home.running_records import RunningRecord
from launcher.ids import is_formation_id
from launcher.spawn.process import escape_control

_TASK_NOT_FOUND = -32001


def register(subparsers: Any) -> None:
    approve = subparsers.add_parser(
        "approve", help="let a call that waits for the operator run",
        description="A call along an edge with `approve: true` waits at the callee's door "
                    "until the operator decides. Let task TASK_ID at member MEMBER of "
                    "formation FRM run (`mur approvals FRM` lists what waits).")
    _target(approve)
    approve.set_defaults(handler=_approve)
    deny = subparsers.add_parser(
        "deny", help="reject a call that waits for the operator",
        description="Reject task TASK_ID waiting at member MEMBER of formation FRM; its "
                    "caller's call fails with the reason.")
    _target(deny)
    deny.add_argument("--reason", default="", metavar="TEXT",
                      help="why, told to the caller (and kept in the trace)")
    deny.set_defaults(handler=_deny)
    listing = subparsers.add_parser(
        "approvals", help="list the calls that wait for the operator in a formation",
        description="Every task waiting for the operator's approval across formation FRM: "
                    "the member it waits at, its caller, the head of its text and how "
                    "long it has waited.")
    listing.add_argument("formation", metavar="FRM", nargs="?",
                         help="a running formation's id (frm_...; a unique prefix will do); "
                              "without it, the one formation running (or the one running "
                              "in --project)")
    listing.add_argument("--project", type=Path, default=Path("."), metavar="DIR",
                         help="where to look for the one formation when FRM is not given "
                              "and several run (default: the current directory)")
    listing.add_argument("--json", action="store_true",
                         help="print one JSON object: {formation_id, approvals: [...]}")
    listing.set_defaults(handler=_approvals)


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("formation", metavar="FRM", help="a running formation's id (frm_...)")
    parser.add_argument("member", metavar="MEMBER", help="the member the task waits at")
    parser.add_argument("task_id", metavar="TASK_ID",
                        help="the task's id, or a unique start of it (mur approvals)")
    parser.add_argument("--json", action="store_true", help="print the task as JSON")


# --- a member's door ---------------------------------------------------------------------

def formation_sessions(fail: Fail, formation: str) -> list[RunningRecord] | int:
    """The live member sessions of ``formation`` (delegated children aside)."""
    if not is_formation_id(formation):
        return fail(f"`{escape_control(formation[:64])}` is not a formation id (frm_…); "
                    "`mur ps` lists what runs", 2)
    live = live_records(fail)
    if live is None:
        return 1
    if not any(r.kind == "launcher" and r.id == formation for r in live):
        return fail(f"formation {formation} is not running")
    return [r for r in live if r.kind == "session" and r.formation_id == formation
            and r.parent_session is None and r.door_url and r.records_dir]


def member_door(fail: Fail, formation: str, member: str) -> RunningRecord | int:
    sessions = formation_sessions(fail, formation)
    if isinstance(sessions, int):
        return sessions
    for record in sessions:
        if record.member == member:
            return record
    names = ", ".join(sorted(r.member or "?" for r in sessions))
    return fail(f"formation {formation} has no running member "
                f"`{escape_control(member[:64])}` (its members: {names})")


def operator_call(record: RunningRecord, method: str, params: dict[str, Any]) -> Any:
    """``method`` at ``record``'s door with its operator token: the JSON answer (None
    when it is not JSON). Raises httpx.HTTPError and OSError (the token unreadable)."""
    import httpx

    from gateway.protocol import A2A_VERSION, VERSION_HEADER
    from launcher.commands.send import json_or_none
    from launcher.home.records import OPERATOR_TOKEN_FILE, read_operator_token

    assert record.door_url is not None and record.records_dir is not None
    token = read_operator_token(Path(record.records_dir) / OPERATOR_TOKEN_FILE)
    try:
        response = httpx.post(record.door_url, timeout=30.0, json={
            "jsonrpc": "2.0", "id": 1, "method": method, "params": params},
            headers={"Authorization": f"Bearer {token}", VERSION_HEADER: A2A_VERSION})
    finally:
        del token
    return json_or_none(response.content, None)


# --- the commands --------------------------------------------------------------------------

def _approve(args: argparse.Namespace) -> int:
    return _decide(args, "approve", "murmur.ApproveTask", {"id": args.task_id})


def _deny(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"id": args.task_id}
    if args.reason.strip():
        params["reason"] = args.reason.strip()
    return _decide(args, "deny", "murmur.DenyTask", params)


def _decide(args: argparse.Namespace, command: str, method: str,
            params: dict[str, Any]) -> int:
    import httpx

    fail = failer(command, args)
    record = member_door(fail, args.formation, args.member)
    if isinstance(record, int):
        return record
    task_id = _whole_task_id(fail, record, args.task_id, args.formation)
    if isinstance(task_id, int):
        return task_id
    params["id"] = task_id
    shown = escape_control(task_id[:80])
    try:
        answer = operator_call(record, method, params)
    except (httpx.HTTPError, OSError) as exc:
        return fail(f"the door of member {args.member} cannot be reached "
                    f"({type(exc).__name__})")
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        if error.get("code") == _TASK_NOT_FOUND:
            return fail(f"no task {shown} waits for approval at member {args.member} "
                        f"(`mur approvals {args.formation}` lists what waits)")
        return fail(f"the door refused: {escape_control(str(error.get('message'))[:300])}")
    task = answer.get("result") if isinstance(answer, dict) else None
    if not isinstance(task, dict):
        return fail(f"the door of member {args.member} answered with no task")
    if args.json:
        print(json.dumps(task))
    elif command == "approve":
        print(f"approved task {shown} at member {args.member}: it runs now")
    else:
        print(f"denied task {shown} at member {args.member}")
    return 0


def _whole_task_id(fail: Fail, record: RunningRecord, given: str,
                   formation: str) -> str | int:
    """``given`` made whole from the tasks waiting at ``record``'s door when it starts
    exactly one of them (a whole id is sent as it is: the door answers for it)."""
    import httpx

    try:
        answer = operator_call(record, "murmur.ListApprovals", {})
    except (httpx.HTTPError, OSError):
        return given
    result = answer.get("result") if isinstance(answer, dict) else None
    rows = result.get("approvals") if isinstance(result, dict) else None
    waiting = [str(row.get("taskId")) for row in rows or () if isinstance(row, dict)]
    if given in waiting:
        return given
    found = [task_id for task_id in waiting if task_id.startswith(given)]
    if len(found) > 1:
        return fail(f"`{escape_control(given[:80])}` starts {len(found)} tasks waiting at "
                    f"member {record.member} ({', '.join(found)}): give more of the id")
    return found[0] if found else given


def _one_formation(fail: Fail, project: Path) -> str | int:
    """The one formation running, else the one running in ``project``."""
    live = live_records(fail)
    if live is None:
        return 1
    running = sorted(r.id for r in live if r.kind == "launcher")
    if len(running) == 1:
        return running[0]
    here = os.path.realpath(project)
    mine = sorted(r.id for r in live if r.kind == "launcher" and r.project_dir is not None
                  and os.path.realpath(r.project_dir) == here)
    if len(mine) == 1:
        return mine[0]
    if not running:
        return fail("no formation runs; `mur ps` lists what runs")
    return fail(f"{len(running)} formations run ({', '.join(running)}); name one "
                "(a unique prefix will do), or run this in its project folder")


def _approvals(args: argparse.Namespace) -> int:
    import httpx

    fail = failer("approvals", args)
    if args.formation is None:
        found = _one_formation(fail, args.project)
        if isinstance(found, int):
            return found
        args.formation = found
    sessions = formation_sessions(fail, args.formation)
    if isinstance(sessions, int):
        return sessions
    rows: list[dict[str, Any]] = []
    for record in sessions:
        try:
            answer = operator_call(record, "murmur.ListApprovals", {})
        except (httpx.HTTPError, OSError):
            continue                        # a member ending now holds nothing to decide
        result = answer.get("result") if isinstance(answer, dict) else None
        if isinstance(result, dict) and isinstance(result.get("approvals"), list):
            rows += [{"member": record.member, **row} for row in result["approvals"]
                     if isinstance(row, dict)]
    rows.sort(key=lambda row: -float(row.get("waitedSeconds") or 0))
    if args.json:
        print(json.dumps({"formation_id": args.formation, "approvals": rows}))
        return 0
    if not rows:
        print(f"nothing waits for approval in {args.formation}")
        return 0
    print(f"{'MEMBER':<14} {'CALLER':<14} {'TASK':<34} {'WAITED':>8}  TEXT")
    for row in rows:
        text = escape_control(str(row.get("text", "")).replace("\n", " ")[:60])
        print(f"{row['member']:<14} {str(row.get('caller')):<14} {str(row.get('taskId')):<34} "
              f"{float(row.get('waitedSeconds') or 0):>7.0f}s  {text}")
    return 0
