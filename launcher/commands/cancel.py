"""``mur cancel``: ``CancelTask`` at a door as the operator, and what the task says
after it."""

from __future__ import annotations

import argparse
import json

from gateway.protocol import state_word
from launcher.commands.common import failer
from launcher.commands.send import json_or_none, operator_door, post_cancel, rpc_error
from launcher.spawn.process import escape_control

_TASK_NOT_FOUND = -32001
_TASK_NOT_CANCELABLE = -32002


def cancel(args: argparse.Namespace) -> int:
    """``mur cancel <frm_…|ses_…|door-url> TASK_ID [--json]``: ``CancelTask`` at the entry
    member's door of a formation (or a session's door) with its operator token."""
    import httpx

    fail = failer("cancel", args)
    task_id: str = args.task_id
    door = operator_door(fail, args.target)
    if isinstance(door, int):
        return door
    door_url, token, label = door
    try:
        response = post_cancel(door_url, token, task_id)
    except httpx.HTTPError as exc:
        return fail(f"the door of {label} cannot be reached ({type(exc).__name__})")
    finally:
        del token
    answer = json_or_none(response.content, None)
    error = answer.get("error") if isinstance(answer, dict) else None
    shown = escape_control(task_id[:80])
    if isinstance(error, dict):
        if error.get("code") == _TASK_NOT_FOUND:
            return fail(f"{label} has no task {shown} (mur ps lists what runs; ListTasks "
                        "on the door lists its tasks)")
        if error.get("code") == _TASK_NOT_CANCELABLE:
            return fail(f"task {shown} of {label} has already ended; nothing was canceled")
        return fail(rpc_error(error).replace("refused the task", "refused the cancel"))
    task = answer.get("result") if isinstance(answer, dict) else None
    if not isinstance(task, dict):
        return fail(f"the door of {label} answered HTTP {response.status_code} with no task")
    if args.json:
        print(json.dumps(task))
        return 0
    status = task.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    print(f"canceled task {shown} of {label} ({state_word(state)})")
    return 0
