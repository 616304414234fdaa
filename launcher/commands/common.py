"""What the operator's commands share (``mur stop``, ``ps``, ``send``, ``cancel``,
``logs``, ``trace``): how a command reports a failure (text, or one JSON object with
``--json``), the refusal of something that is not an id, and the running records.

Each command is ``fn(args) -> int`` (the exit status). They find what runs from the
running records under ``$MURMUR_HOME/running/`` (a launcher's is named by its formation
id, a session's by its session id) and never print a token.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from launcher.diagnostics import failure_json
from launcher.home.running_records import RunningRecord, RunningRecordsUnreadable, list_live
from launcher.spawn.process import escape_control

Fail = Callable[..., int]


def failer(command: str, args: argparse.Namespace) -> Fail:
    """How ``command`` reports a failure: ``mur <command>: <message>`` on stderr, or with
    ``--json`` one object on stdout and nothing on stderr (:func:`failure_json`, the one
    shape of every command's failure); returns the exit status."""
    json_mode = bool(getattr(args, "json", False))

    def fail(message: str, code: int = 1) -> int:
        if json_mode:
            print(json.dumps(failure_json(f"mur {command}", code, message)))
        else:
            print(f"mur {command}: {message}", file=sys.stderr)
        return code

    return fail


def not_an_id(fail: Fail, value: str) -> int:
    return fail(f"`{escape_control(value[:64])}` is neither a formation id (frm_…) "
                "nor a session id (ses_…); `mur ps` lists what runs", 2)


def live_records(fail: Fail) -> list[RunningRecord] | None:
    try:
        return list_live()
    except RunningRecordsUnreadable as exc:
        fail(f"the running records in {exc.filename} cannot be read")
        return None
