"""The operator's commands: ``mur stop``, ``mur ps``, ``mur send``, ``mur cancel``,
``mur logs``, ``mur trace show``.

Each is ``fn(args) -> int`` (the exit status). They find what runs from the running
records under ``$MURMUR_HOME/running/`` (a launcher's is named by its formation id, a
session's by its session id) and never print a token: ``mur send`` reads the session's
``operator.token`` and puts it in one ``Authorization`` header, nowhere else.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gateway.protocol import A2A_VERSION, VERSION_HEADER
from gateway.sse import event_data
from launcher.durations import DURATION_FORMS, parse_duration
from launcher.errors import LauncherError
from launcher.ids import is_formation_id, is_session_id
from launcher.live_tasks import live_tasks, render_tasks
from launcher.process import escape_control
from launcher.records import (
    OPERATOR_TOKEN_FILE,
    RunningRecord,
    RunningRecordsUnreadable,
    is_running,
    list_live,
    prune_stale,
    read_operator_token,
)

#: How long ``mur stop`` waits for what it stopped to be gone: a launcher may take the
#: 25 s grace it gives members, plus its own teardown.
STOP_WAIT = 40.0
_STATE_PREFIX = "TASK_STATE_"
_TASK_NOT_FOUND = -32001
_TASK_NOT_CANCELABLE = -32002
_MEMBER_BUSY = -32050


Fail = Callable[..., int]


def _failer(command: str, args: argparse.Namespace) -> Fail:
    """How ``command`` reports a failure: ``mur <command>: <message>`` on stderr, or with
    ``--json`` one object on stdout and nothing on stderr,
    ``{"ok": false, "command", "error", "exit_status"}``; returns the exit status."""
    json_mode = bool(getattr(args, "json", False))

    def fail(message: str, code: int = 1) -> int:
        if json_mode:
            print(json.dumps({"ok": False, "command": f"mur {command}", "error": message,
                              "exit_status": code}))
        else:
            print(f"mur {command}: {message}", file=sys.stderr)
        return code

    return fail


def _not_an_id(fail: Fail, value: str) -> int:
    return fail(f"`{escape_control(value[:64])}` is neither a formation id (frm_…) "
                "nor a session id (ses_…); `mur ps` lists what runs", 2)


def _live_records(fail: Fail) -> list[RunningRecord] | None:
    try:
        return list_live()
    except RunningRecordsUnreadable as exc:
        fail(f"the running records in {exc.filename} cannot be read")
        return None


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (field 4 of /proc/<pid>/stat), None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        return int(data[data.rfind(b")") + 1:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


# --------------------------------------------------------------------------- mur stop


def _signal(record: RunningRecord) -> bool:
    try:
        os.kill(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(records: Iterable[RunningRecord], timeout: float) -> list[RunningRecord]:
    """The records whose process still runs after ``timeout`` seconds."""
    waiting = list(records)
    end = time.monotonic() + timeout
    while waiting and time.monotonic() < end:
        waiting = [record for record in waiting if record.is_live()]
        if waiting:
            time.sleep(0.1)
    return [record for record in waiting if record.is_live()]


def stop(args: argparse.Namespace) -> int:
    """``mur stop <frm_…|ses_…>``: SIGTERM to a formation's launcher (which ends every
    member), or to one session; waits until it is gone."""
    fail = _failer("stop", args)
    ident: str = args.id
    if not (is_formation_id(ident) or is_session_id(ident)):
        return _not_an_id(fail, ident)
    live = _live_records(fail)
    if live is None:
        return 1
    if is_formation_id(ident):
        targets = _formation_targets(ident, live)
        kind = "formation"
    else:
        targets = [record for record in live if record.id == ident]
        kind = "session"
    if not targets:
        return fail(f"{kind} {ident} is not running")
    try:
        signalled = [record for record in targets if _signal(record)]
    except PermissionError:
        return fail(f"{kind} {ident} belongs to another user; it was not stopped")
    left = _wait_gone(signalled, STOP_WAIT)
    if args.json:  # one object either way: "stopped" says which
        print(json.dumps({"id": ident, "kind": kind, "stopped": not left,
                          "signalled": [record.pid for record in signalled]}))
        return 1 if left else 0
    if left:
        return fail(f"{kind} {ident} was sent SIGTERM but still runs after "
                    f"{STOP_WAIT:g} seconds (pid {', '.join(str(r.pid) for r in left)})")
    print(f"stopped {kind} {ident}")
    return 0


def _started_by(pid: int, launcher_pid: int) -> bool:
    """Whether the launcher started ``pid``: its child, or a child of its member
    template (docs/launcher.md, "Starting members")."""
    parent = parent_pid(pid)
    return parent == launcher_pid or (parent is not None and
                                      parent_pid(parent) == launcher_pid)


def _formation_targets(formation_id: str, live: list[RunningRecord]) -> list[RunningRecord]:
    """The launcher, and every session of the formation the launcher did not start (a
    member started by hand, which no lifeline winds down). The launcher's own members
    are never signalled: it ends them by closing their lifelines."""
    launcher = next((record for record in live
                     if record.kind == "launcher" and record.id == formation_id), None)
    targets = [launcher] if launcher is not None else []
    for record in live:
        if record.kind != "session" or record.formation_id != formation_id:
            continue
        if launcher is not None and _started_by(record.pid, launcher.pid):
            continue
        targets.append(record)
    return targets


# --------------------------------------------------------------------------- mur ps


def _session_row(record: RunningRecord, entry: str | None) -> dict[str, Any]:
    return {"session_id": record.id, "member": record.member,
            "entry": entry is not None and record.member == entry, "pid": record.pid,
            "capsule": record.capsule, "version": record.version,
            "door_url": record.door_url, "records_dir": record.records_dir,
            "started": record.started, "tasks": live_tasks(record.records_dir)}


def running_state(live: list[RunningRecord]) -> dict[str, Any]:
    """Formations (each with its members) and standalone sessions, from live records."""
    formations: dict[str, dict[str, Any]] = {}
    for record in live:
        if record.kind == "launcher":
            formations[record.id] = {"formation_id": record.id, "launcher_pid": record.pid,
                                     "project_dir": record.project_dir,
                                     "entry": record.member, "started": record.started,
                                     "members": []}
    sessions = []
    for record in sorted(live, key=lambda r: r.started):
        if record.kind != "session":
            continue
        if record.formation_id:
            formation = formations.setdefault(record.formation_id, {
                "formation_id": record.formation_id, "launcher_pid": None,
                "project_dir": None, "entry": None, "started": record.started,
                "members": []})
            formation["members"].append(_session_row(record, formation["entry"]))
        else:
            sessions.append(_session_row(record, None))
    for formation in formations.values():
        formation["members"].sort(key=lambda row: (not row["entry"], row["started"]))
    ordered = sorted(formations.values(), key=lambda f: f["formation_id"])
    return {"formations": ordered, "sessions": sessions}


def _table(rows: list[list[str]], indent: str = "") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [indent + "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)),
                                row[-1]]).rstrip() for row in rows]


def render_ps(state: dict[str, Any]) -> str:
    lines: list[str] = []
    for formation in state["formations"]:
        launcher = (f"launcher pid {formation['launcher_pid']}" if formation["launcher_pid"]
                    else "launcher gone")
        lines.append(f"formation {formation['formation_id']}  {launcher}  project "
                     f"{formation['project_dir'] or '-'}")
        rows = [["MEMBER", "ENTRY", "SESSION", "PID", "TASKS", "DOOR"]]
        rows += [[m["member"] or "-", "yes" if m["entry"] else "", m["session_id"],
                  str(m["pid"]), render_tasks(m["tasks"]), m["door_url"] or "-"]
                 for m in formation["members"]]
        lines += _table(rows, "  ") if len(rows) > 1 else ["  (no member running)"]
    if state["sessions"]:
        if lines:
            lines.append("")
        rows = [["SESSION", "CAPSULE", "VERSION", "PID", "TASKS", "DOOR"]]
        rows += [[s["session_id"], s["capsule"] or "-", s["version"] or "-", str(s["pid"]),
                  render_tasks(s["tasks"]), s["door_url"] or "-"] for s in state["sessions"]]
        lines += _table(rows)
    return "\n".join(lines) + "\n" if lines else "nothing is running\n"


def ps(args: argparse.Namespace) -> int:
    """``mur ps [--json]``: running formations with their members, then sessions."""
    fail = _failer("ps", args)
    try:
        prune_stale()
    except RunningRecordsUnreadable as exc:
        return fail(f"the running records in {exc.filename} cannot be read")
    live = _live_records(fail)
    if live is None:
        return 1
    state = running_state(live)
    if args.json:
        print(json.dumps(state))
    else:
        sys.stdout.write(render_ps(state))
    return 0


# --------------------------------------------------------------------------- mur send


class SendError(LauncherError):
    """``mur send`` cannot reach or use a door; the text says why (never a token)."""


class MemberBusy(SendError):
    """The door answered ``-32050``: the member holds all it can; offer again after
    ``retry_after`` seconds (its ``retryAfterMs``)."""

    def __init__(self, retry_after: float) -> None:
        super().__init__("the member is busy")
        self.retry_after = retry_after


def resolve_door(target: str, live: list[RunningRecord]) -> tuple[str, Path, str]:
    """(door URL, operator.token path, label) of a formation's entry door, a session's
    door, or a door URL some live session serves."""
    if is_formation_id(target):
        launcher = next((r for r in live if r.kind == "launcher" and r.id == target), None)
        if launcher is None:
            raise SendError(f"formation {target} is not running")
        if not launcher.door_url or not launcher.records_dir:
            raise SendError(f"the entry member of formation {target} is not up yet")
        return launcher.door_url, Path(launcher.records_dir) / OPERATOR_TOKEN_FILE, (
            launcher.member or target)
    if is_session_id(target):
        record = next((r for r in live if r.kind == "session" and r.id == target), None)
        if record is None:
            raise SendError(f"session {target} is not running")
        if not record.door_url or not record.records_dir:
            raise SendError(f"session {target} has no door yet")
        return record.door_url, Path(record.records_dir) / OPERATOR_TOKEN_FILE, (
            record.member or target)
    if target.startswith(("http://", "https://")):
        wanted = target.rstrip("/")
        for record in live:
            if record.kind == "session" and record.door_url and record.records_dir and (
                    record.door_url.rstrip("/") == wanted):
                return record.door_url, Path(record.records_dir) / OPERATOR_TOKEN_FILE, (
                    record.member or record.id)
        raise SendError(f"no running session serves {escape_control(target[:200])}; mur send "
                        "uses a session's operator token, which only a session of this "
                        "MURMUR_HOME has")
    raise SendError(f"`{escape_control(target[:64])}` is not a formation id (frm_…), a session "
                    "id (ses_…) or a door URL (http://127.0.0.1:PORT)")


def _text_of(parts: object) -> str:
    if not isinstance(parts, list):
        return ""
    return "\n".join(part["text"] for part in parts
                     if isinstance(part, dict) and isinstance(part.get("text"), str))


def state_word(state: object) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` as ``input-required``."""
    text = str(state or "unknown")
    return text.removeprefix(_STATE_PREFIX).lower().replace("_", "-")


class TaskFollower:
    """The task as a stream reports it: the first snapshot, then each update."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.task: dict[str, Any] = {}
        self.message: dict[str, Any] | None = None

    def take(self, result: Any) -> None:
        if not isinstance(result, dict):
            return
        if isinstance(result.get("task"), dict):
            self.task = dict(result["task"])
            self._status_line(self.task.get("status"))
        elif isinstance(result.get("statusUpdate"), dict):
            status = result["statusUpdate"].get("status")
            self.task["status"] = status
            self._status_line(status)
        elif isinstance(result.get("artifactUpdate"), dict):
            self._artifact(result["artifactUpdate"])
        elif isinstance(result.get("message"), dict):
            self.message = result["message"]

    def _status_line(self, status: object) -> None:
        if not isinstance(status, dict):
            return
        text = ""
        if isinstance(status.get("message"), dict):
            text = _text_of(status["message"].get("parts"))
        shown = f": {escape_control(text[:500])}" if text else ""
        print(f"[{self.label}] {state_word(status.get('state'))}{shown}", file=sys.stderr,
              flush=True)

    def _artifact(self, update: dict[str, Any]) -> None:
        chunk = update.get("artifact")
        if not isinstance(chunk, dict):
            return
        artifacts = list(self.task.get("artifacts") or [])
        index = next((i for i, a in enumerate(artifacts)
                      if a.get("artifactId") == chunk.get("artifactId")), None)
        if index is None:
            artifacts.append(chunk)
        elif update.get("append"):
            artifacts[index] = {**artifacts[index], "parts": [
                *artifacts[index].get("parts", []), *chunk.get("parts", [])]}
        else:
            artifacts[index] = chunk
        self.task["artifacts"] = artifacts

    @property
    def state(self) -> str:
        if self.message is not None and not self.task:
            return "TASK_STATE_COMPLETED"
        status = self.task.get("status")
        return str(status.get("state")) if isinstance(status, dict) else ""

    def answer(self) -> str:
        if self.message is not None:
            return _text_of(self.message.get("parts"))
        texts = [_text_of(artifact.get("parts")) for artifact in self.task.get("artifacts", [])
                 if isinstance(artifact, dict)]
        if any(texts):
            return "\n".join(text for text in texts if text)
        status = self.task.get("status")
        if isinstance(status, dict) and isinstance(status.get("message"), dict):
            return _text_of(status["message"].get("parts"))
        return ""


def _rpc_error(error: object) -> str:
    if not isinstance(error, dict):
        return "the door answered with an error"
    message = str(error.get("message") or "error")
    return f"the door refused the task ({error.get('code')}: {escape_control(message[:300])})"


def _send_request(text: str, task_id: str | None = None,
                  context_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                               "parts": [{"text": text}]}
    if task_id is not None:
        message["taskId"] = task_id
    if context_id is not None:
        message["contextId"] = context_id
    return {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": message}}


def _refusal(error: object) -> SendError:
    """The door's JSON-RPC error as the exception ``mur send`` acts on."""
    if isinstance(error, dict) and error.get("code") == _MEMBER_BUSY:
        return MemberBusy(_retry_after(error))
    return SendError(_rpc_error(error))


def _retry_after(error: dict[str, Any]) -> float:
    """The ``retryAfterMs`` of a ``-32050`` error's ErrorInfo, in seconds (default 1 s)."""
    for detail in error.get("data") or []:
        metadata = detail.get("metadata") if isinstance(detail, dict) else None
        value = metadata.get("retryAfterMs") if isinstance(metadata, dict) else None
        if isinstance(value, str) and value.isdigit():
            return max(0.05, int(value) / 1000)
    return 1.0


def send_task(door_url: str, token: str, text: str, follower: TaskFollower, *,
              task_id: str | None = None, context_id: str | None = None) -> None:
    """Send ``text`` (to task ``task_id`` when given) with ``SendStreamingMessage`` and
    follow the stream to its end; :class:`MemberBusy` when the member takes no task now."""
    import httpx

    headers = {"Authorization": f"Bearer {token}", VERSION_HEADER: A2A_VERSION,
               "Accept": "text/event-stream"}
    timeout = httpx.Timeout(10.0, read=None)
    try:
        with httpx.Client(trust_env=False, follow_redirects=False, timeout=timeout) as client, \
                client.stream("POST", door_url, json=_send_request(text, task_id, context_id),
                              headers=headers) as response:
            if response.status_code != 200:
                response.read()
                raise SendError(_http_refusal(response.status_code, response.content))
            content_type = response.headers.get("content-type", "")
            if not content_type.startswith("text/event-stream"):
                response.read()
                raise _refusal(_json_or_none(response.content, "error"))
            for payload in event_data(response.iter_lines()):
                data = _json_or_none(payload.encode(), None)
                if not isinstance(data, dict):
                    continue
                if "error" in data:
                    raise _refusal(data["error"])
                follower.take(data.get("result"))
    except httpx.HTTPError as exc:
        raise SendError(f"the door at {door_url} could not be reached "
                        f"({type(exc).__name__})") from None


def _json_or_none(raw: bytes, key: str | None) -> Any:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if key is None:
        return data
    return data.get(key) if isinstance(data, dict) else None


def _http_refusal(status: int, body: bytes) -> str:
    data = _json_or_none(body, None)
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        message = escape_control(str(data.get("message", ""))[:300])
        return f"the door answered {status} {data['error']}: {message}"
    return f"the door answered HTTP {status}"


def send(args: argparse.Namespace) -> int:
    """``mur send <frm_…|ses_…|door-url> TEXT [--task-id ID] [--reply TEXT]... [--timeout
    D] [--json]``: the operator's client. A busy member is offered the task again after
    the ``retryAfterMs`` its door names, until ``--timeout``; a task that asks for input
    gets the next ``--reply``, or on a terminal what the operator types; with neither it
    is canceled (nobody could answer it) and the command fails saying so."""
    fail = _failer("send", args)
    try:
        timeout = parse_duration(args.timeout)
    except ValueError as exc:
        return fail(f"--timeout {exc}; write {DURATION_FORMS}", 2)
    door = _operator_door(fail, args.target)
    if isinstance(door, int):
        return door
    door_url, token, label = door
    conversation = _Conversation(door_url, label, args, time.monotonic() + timeout)
    try:
        follower = conversation.run(token)
    except SendError as exc:
        return fail(str(exc))
    finally:
        del token
    state = follower.state
    if args.json:  # the task (its state says how it ended), one object either way
        print(json.dumps(follower.task if follower.task else {"message": follower.message}))
        return 0 if state == "TASK_STATE_COMPLETED" else 1
    if state == "TASK_STATE_COMPLETED":
        print(follower.answer())
        return 0
    answer = follower.answer()
    detail = f": {escape_control(answer[:500])}" if answer else ""
    return fail(f"the task ended {state_word(state)}{detail}")


class _Conversation:
    """One ``mur send``: the first message, the offers a busy member needs, and the
    replies a task asks for, until the task ends."""

    def __init__(self, door_url: str, label: str, args: argparse.Namespace,
                 deadline: float) -> None:
        self.door_url = door_url
        self.label = label
        self.text: str = args.text
        self.task_id: str | None = args.task_id
        self.replies: list[str] = list(args.reply or [])
        self.ask = not args.json and sys.stdin is not None and sys.stdin.isatty()
        self.deadline = deadline

    def run(self, token: str) -> TaskFollower:
        context_id: str | None = None
        while True:
            follower = TaskFollower(self.label)
            try:
                send_task(self.door_url, token, self.text, follower, task_id=self.task_id,
                          context_id=context_id)
            except MemberBusy as busy:
                self._wait_out(busy)
                continue
            if follower.state != "TASK_STATE_INPUT_REQUIRED":
                return follower
            reply = self._reply(follower.answer())
            task_id = str(follower.task.get("id") or "")
            if reply is None:
                _cancel_quietly(self.door_url, token, task_id)
                question = escape_control(follower.answer()[:300])
                raise SendError(f"the task asks for input ({question}) and no --reply "
                                "answers it; it was canceled. Send again with --reply TEXT, "
                                "or from a terminal to be asked")
            self.text, self.task_id = reply, task_id
            context = follower.task.get("contextId")
            context_id = context if isinstance(context, str) else None

    def _wait_out(self, busy: MemberBusy) -> None:
        left = self.deadline - time.monotonic()
        if left <= busy.retry_after:
            raise SendError(f"{self.label} stayed busy until --timeout; nothing was sent. "
                            "Try again later, or with a longer --timeout")
        print(f"[{self.label}] busy: offering the task again in {busy.retry_after:.1f}s",
              file=sys.stderr, flush=True)
        time.sleep(busy.retry_after)

    def _reply(self, question: str) -> str | None:
        if self.replies:
            return self.replies.pop(0)
        if not self.ask:
            return None
        try:
            answer = input(f"[{self.label}] {escape_control(question[:500]) or 'input?'}\n> ")
        except EOFError:
            return None
        return answer if answer.strip() else None


def _cancel_quietly(door_url: str, token: str, task_id: str) -> None:
    """Cancel ``task_id`` (a task left waiting for input nobody will give)."""
    import httpx

    if task_id:
        with contextlib.suppress(httpx.HTTPError):
            _post_cancel(door_url, token, task_id)


def _post_cancel(door_url: str, token: str, task_id: str) -> Any:
    """``CancelTask`` of ``task_id`` at the door, as its operator; the httpx response."""
    import httpx

    request = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task_id}}
    return httpx.post(door_url, json=request, timeout=30.0, headers={
        "Authorization": f"Bearer {token}", VERSION_HEADER: A2A_VERSION})


def _operator_door(fail: Fail, target: str) -> tuple[str, str, str] | int:
    """(door URL, operator token, label) of ``target`` as ``mur send`` resolves it, or
    the exit status of the failure ``fail`` reported."""
    live = _live_records(fail)
    if live is None:
        return 1
    try:
        door_url, token_path, label = resolve_door(target, live)
    except SendError as exc:
        return fail(str(exc))
    try:
        return door_url, read_operator_token(token_path), label
    except (OSError, UnicodeDecodeError):
        return fail(f"the operator token of {label} cannot be read from {token_path}")


# --------------------------------------------------------------------------- mur trace show

#: Fields every record has, shown in their own columns.
_COLUMNS = ("ts", "event", "member")


def _field(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = escape_control(text)
    return text if len(text) <= 120 else text[:117] + "..."


def render_record(record: dict[str, Any]) -> str:
    """One trace record for people: time, member, event, then its key fields."""
    fields = " ".join(f"{key}={_field(value)}" for key, value in record.items()
                      if key not in _COLUMNS and value is not None)
    member = str(record.get("member") or "-")
    return (f"{record.get('ts', '-')}  {escape_control(member):<12}  "
            f"{escape_control(str(record.get('event', '-'))):<18}  {fields}").rstrip()


def trace_records(ident: str) -> list[dict[str, Any]] | None:
    """The merged records of a formation or one session; None when none are found."""
    from launcher.trace import (
        find_formation_traces,
        find_session_trace,
        merge_traces,
        read_trace,
    )

    if is_formation_id(ident):
        pairs = find_formation_traces(ident)
        return merge_traces(pairs) if pairs else None
    path = find_session_trace(ident)
    if path is None:
        return None
    first = next(iter(read_trace(path)), {})
    member = first.get("formation_member") or "-"
    return merge_traces([(str(member), path)])


def cancel(args: argparse.Namespace) -> int:
    """``mur cancel <frm_…|ses_…|door-url> TASK_ID [--json]``: ``CancelTask`` at the entry
    member's door of a formation (or a session's door) with its operator token."""
    import httpx

    fail = _failer("cancel", args)
    task_id: str = args.task_id
    door = _operator_door(fail, args.target)
    if isinstance(door, int):
        return door
    door_url, token, label = door
    try:
        response = _post_cancel(door_url, token, task_id)
    except httpx.HTTPError as exc:
        return fail(f"the door of {label} cannot be reached ({type(exc).__name__})")
    finally:
        del token
    answer = _json_or_none(response.content, None)
    error = answer.get("error") if isinstance(answer, dict) else None
    shown = escape_control(task_id[:80])
    if isinstance(error, dict):
        if error.get("code") == _TASK_NOT_FOUND:
            return fail(f"{label} has no task {shown} (mur ps lists what runs; ListTasks "
                        "on the door lists its tasks)")
        if error.get("code") == _TASK_NOT_CANCELABLE:
            return fail(f"task {shown} of {label} has already ended; nothing was canceled")
        return fail(_rpc_error(error).replace("refused the task", "refused the cancel"))
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


#: How often ``mur logs --follow`` looks for new lines.
FOLLOW_POLL = 0.25


def _log_files(ident: str) -> list[tuple[str, Path]]:
    """(label, log file) of each session of a formation, or of one session: its
    ``logs/member.log`` then ``logs/bootstrap.log``, whether or not they exist yet."""
    from launcher.records import MEMBER_LOG
    from launcher.trace import find_formation_traces, find_session_trace

    if is_formation_id(ident):
        traces = find_formation_traces(ident)
    else:
        trace = find_session_trace(ident)
        traces = [(ident, trace)] if trace is not None else []
    return [(label, trace.parent / "logs" / name)
            for label, trace in traces for name in (MEMBER_LOG, "bootstrap.log")]


class _LogTail:
    """One log file read on from where it was last read, whole lines only."""

    def __init__(self, label: str, path: Path) -> None:
        self.label = label
        self.path = path
        self._offset = 0
        self._pending = b""

    def lines(self) -> list[str]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._pending + data
        complete, newline, self._pending = data.rpartition(b"\n")
        if not newline:
            return []
        text = complete.decode("utf-8", "replace")
        return [f"[{self.label}] {escape_control(line)}" for line in text.split("\n")]


def logs(args: argparse.Namespace) -> int:
    """``mur logs <frm_…|ses_…> [--follow]``: each session's own log (``logs/member.log``:
    warnings, errors and agents' tracebacks) and bootstrap log, each line behind its
    member's name; ``--follow`` prints new lines as they come until the formation or
    session ends (or Ctrl-C)."""
    fail = _failer("logs", args)
    ident: str = args.id
    if not (is_formation_id(ident) or is_session_id(ident)):
        return _not_an_id(fail, ident)
    kind = "formation" if is_formation_id(ident) else "session"
    tails = [_LogTail(label, path) for label, path in _log_files(ident)]
    if not tails:
        return fail(f"no records of {kind} {ident} under the records of this MURMUR_HOME")
    out = sys.stdout
    while True:
        running = bool(args.follow) and is_running(ident)
        for tail in tails:
            for line in tail.lines():
                out.write(line + "\n")
        out.flush()
        if not running:
            return 0
        time.sleep(FOLLOW_POLL)


def trace_show(args: argparse.Namespace) -> int:
    """``mur trace show <frm_…|ses_…> [--json] [--tree | --follow]``: records merged in
    time order, or their call tree, or (``--follow``) the live records."""
    fail = _failer("trace show", args)
    ident: str = args.id
    if not (is_formation_id(ident) or is_session_id(ident)):
        return _not_an_id(fail, ident)
    kind = "formation" if is_formation_id(ident) else "session"
    try:
        records = trace_records(ident)
    except OSError as exc:
        return fail(f"the records of {kind} {ident} cannot be read "
                                   f"({exc.strerror or exc})")
    if records is None and getattr(args, "follow", False) and is_running(ident):
        records = []                      # coming up: its traces are not written yet
    if records is None:
        return fail(f"no trace of {kind} {ident} under the records of this "
                                   "MURMUR_HOME")
    out = sys.stdout
    if getattr(args, "follow", False):
        from launcher.trace_follow import follow_trace

        def write(record: dict[str, Any]) -> None:
            out.write((json.dumps(record, ensure_ascii=False) if args.json
                       else render_record(record)) + "\n")
            out.flush()

        for record in records:
            write(record)
        return follow_trace(ident, records, write)
    if getattr(args, "tree", False):
        from launcher.trace_tree import build_tree, render_tree, tree_json

        roots = build_tree(records)
        out.write(json.dumps([tree_json(root) for root in roots], ensure_ascii=False) + "\n"
                  if args.json else render_tree(roots, f"{kind} {ident}"))
        return 0
    for record in records:
        out.write((json.dumps(record, ensure_ascii=False) if args.json
                   else render_record(record)) + "\n")
    return 0
