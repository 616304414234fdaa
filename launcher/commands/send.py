"""``mur send``: the operator's client. It sends a task to a door (a formation's entry
member, a session, or a door URL) with the operator token, follows it and prints the
answer (docs/gateway.md, "The answer of a task"), its control characters escaped, its
line breaks kept: agent text never writes to the operator's terminal; it waits out
``-32050`` with the door's ``retryAfterMs`` and answers an input-required task. The
token is read from the session's ``operator.token`` and put in one ``Authorization``
header, nowhere else. Also the door client ``mur cancel`` uses.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from gateway.protocol import A2A_VERSION, VERSION_HEADER, state_word
from gateway.proxy.egress import answer_text, failure_text, parts_text
from gateway.sse import event_data
from launcher.commands.common import Fail, failer, live_records
from launcher.durations import DURATION_FORMS, parse_duration
from launcher.errors import LauncherError
from launcher.home.records import OPERATOR_TOKEN_FILE, read_operator_token
from launcher.home.running_records import RunningRecord
from launcher.ids import is_formation_id, is_session_id
from launcher.spawn.process import escape_control, escape_lines

_STATE_PREFIX = "TASK_STATE_"
_MEMBER_BUSY = -32050


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
    raise SendError(not_a_target(target))


def is_target(target: str) -> bool:
    """Whether ``target`` has the form of what ``mur send`` and ``mur cancel`` name."""
    return (is_formation_id(target) or is_session_id(target)
            or target.startswith(("http://", "https://")))


def not_a_target(target: str) -> str:
    return (f"`{escape_control(target[:64])}` is not a formation id (frm_…), a session id "
            "(ses_…) or a door URL (http://127.0.0.1:PORT); `mur ps` lists what runs")


class TaskFollower:
    """The task as a stream reports it: the first snapshot, then each update. A status
    update moves the status message it replaces into the task's history, as the door
    keeps it, so the answer is read by the one rule (``answer_text``) from the task the
    stream built: an agent that says its reply in a WORKING message and completes with
    none has its reply there."""

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
            self._keep_status_message()
            self.task["status"] = status
            self._status_line(status)
        elif isinstance(result.get("artifactUpdate"), dict):
            self._artifact(result["artifactUpdate"])
        elif isinstance(result.get("message"), dict):
            self.message = result["message"]

    def _keep_status_message(self) -> None:
        """The status message a new status replaces goes to the end of the history."""
        status = self.task.get("status")
        message = status.get("message") if isinstance(status, dict) else None
        if isinstance(message, dict):
            history = self.task.get("history")
            self.task["history"] = [*(history if isinstance(history, list) else []), message]

    def _status_line(self, status: object) -> None:
        if not isinstance(status, dict):
            return
        text = ""
        if isinstance(status.get("message"), dict):
            text = parts_text(status["message"].get("parts"))
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
        """A direct message's text, else the task's answer (docs/gateway.md, "The answer
        of a task")."""
        if self.message is not None:
            return parts_text(self.message.get("parts"))
        return answer_text(self.task)


def rpc_error(error: object) -> str:
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
    return SendError(rpc_error(error))


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
                raise _refusal(json_or_none(response.content, "error"))
            for payload in event_data(response.iter_lines()):
                data = json_or_none(payload.encode(), None)
                if not isinstance(data, dict):
                    continue
                if "error" in data:
                    raise _refusal(data["error"])
                follower.take(data.get("result"))
    except httpx.HTTPError as exc:
        raise SendError(f"the door at {door_url} could not be reached "
                        f"({type(exc).__name__})") from None


def json_or_none(raw: bytes, key: str | None) -> Any:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if key is None:
        return data
    return data.get(key) if isinstance(data, dict) else None


def _http_refusal(status: int, body: bytes) -> str:
    data = json_or_none(body, None)
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
    fail = failer("send", args)
    try:
        timeout = parse_duration(args.timeout)
    except ValueError as exc:
        return fail(f"--timeout {exc}; write {DURATION_FORMS}", 2)
    door = operator_door(fail, args.target)
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
        print(escape_lines(follower.answer()))
        return 0
    why = failure_text(follower.task)
    detail = f": {escape_control(why[:500])}" if why else ""
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
            post_cancel(door_url, token, task_id)


def post_cancel(door_url: str, token: str, task_id: str) -> Any:
    """``CancelTask`` of ``task_id`` at the door, as its operator; the httpx response."""
    import httpx

    request = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task_id}}
    return httpx.post(door_url, json=request, timeout=30.0, headers={
        "Authorization": f"Bearer {token}", VERSION_HEADER: A2A_VERSION})


def operator_door(fail: Fail, target: str) -> tuple[str, str, str] | int:
    """(door URL, operator token, label) of ``target`` as ``mur send`` resolves it, or
    the exit status of the failure ``fail`` reported: 2 for what is not an id or a URL
    (a usage error, as argparse's), 1 for one that names nothing running."""
    if not is_target(target):
        return fail(not_a_target(target), 2)
    live = live_records(fail)
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
