"""One delegated child, from its start to its answer.

In order (docs/delegation.md): :meth:`Child.start` writes the task's text to a 0600 file
in the parent's records (never into an argument list), makes the spawner lifeline and
starts ``mur run --capsule NAME --capsule-version V --project P --json --task FILE
--lifecycle-after-task exit`` holding its read end; :meth:`Child.ready` reads the child's
readiness line and operator token (a child that ends first is refused as
``not_started``); :meth:`Child.run` follows the child's task on its door with
``SubscribeToTask``, streaming its status messages into the parent's task, and
settles the answer when the process ends: exit 0 is the answer (the rest of its stdout,
``result.txt``'s text), anything else a :class:`CallFailed` under ``child:<name>``;
:meth:`Child.cancel` sends ``CancelTask``; :meth:`Child.release` closes the spawner
lifeline, which winds the child down wherever it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

from gateway.protocol import A2A_VERSION, TaskState, state_word
from gateway.proxy.call_failed import CALLER_ENDED, ERROR, REFUSED, CallFailed
from gateway.proxy.egress import parts_text
from gateway.proxy.pending_answer import PendingAnswer
from launcher.member.delegation.refused import DelegationRefused
from launcher.sandbox import descendants
from launcher.spawn.env_names import (
    DIAGNOSTICS_ENV,
    FORMATION_ENV,
    SPAWNER_LIFELINE_ENV,
    WORKDIR_ENV,
)
from launcher.spawn.process import (
    PIPE,
    ChildPipe,
    ManagedProcess,
    make_lifeline_pipe,
    read_line,
)

#: How long a child may take to say it is ready (it unpacks and starts like any member).
READY_SECONDS: Final = 60.0
#: The longest answer read from a child's stdout.
ANSWER_LIMIT: Final = 4 * 1024 * 1024
#: The words of ``result.txt``'s first line for a task that did not complete.
_STATES: Final = {"failed": TaskState.FAILED, "canceled": TaskState.CANCELED,
                  "rejected": TaskState.REJECTED}

StatusSink = Callable[[str], Awaitable[None]]


class Child(PendingAnswer):
    """One child session. ``state``: ``starting``, ``held`` (its door holds the task),
    then ``completed`` or a :class:`CallFailed` state. ``await child`` is its answer."""

    def __init__(self, capsule: str, version: str, *, delegated_by: str) -> None:
        self.capsule = capsule
        self.version = version
        self.name = capsule.rsplit("/", 1)[-1]
        #: The fence its answer is given under in ``task.answers()``.
        self.member = f"child:{self.name}"
        self.delegated_by = delegated_by
        self.state = "starting"
        self.session_id: str | None = None
        self.task_id: str | None = None
        self.exit_status: int | None = None
        self._process: ManagedProcess | None = None
        self._lifeline: ChildPipe | None = None
        self._stdout: asyncio.StreamReader | None = None
        self._door_url = ""
        self._token = ""
        #: Set once the child's door holds the task, or it was refused.
        self.held = asyncio.Event()
        self.refusal: DelegationRefused | None = None
        super().__init__()

    def __repr__(self) -> str:
        return f"ChildHandle(capsule={self.capsule!r}, state={self.state!r})"

    # --- its start --------------------------------------------------------------------

    def start(self, *, project: Path, workdir: Path, task_file: Path, text: str,
              environ: Mapping[str, str], lineage: Mapping[str, str],
              formation_id: str | None, deadline: str | None) -> None:
        """Write the task file and start the child's ``mur run``."""
        _write_private(task_file, text)
        argv = [sys.executable, "-m", "launcher.cli", "run", "--capsule", self.capsule,
                "--capsule-version", self.version, "--project", str(project), "--json",
                "--task", str(task_file), "--lifecycle-after-task", "exit"]
        if deadline is not None:
            argv += ["--deadline", deadline]
        self._lifeline = make_lifeline_pipe()
        env = {**child_environment(environ, formation_id), **lineage,
               SPAWNER_LIFELINE_ENV: str(self._lifeline.child_fd),
               WORKDIR_ENV: str(workdir), DIAGNOSTICS_ENV: "text"}
        try:
            # Owned: the runtime's reaping of orphans agent code left behind must neither
            # reap nor kill a child it waits for itself (launcher/sandbox/descendants.py).
            with descendants.starting():
                self._process = ManagedProcess.start(
                    argv, cwd=workdir, env=env, pass_fds=(self._lifeline.child_fd,),
                    new_process_group=True, stdout=PIPE, stderr=None, name=self.member)
                descendants.own(self._process.pid)
        except OSError as exc:
            self.release()
            raise DelegationRefused(self.capsule, "not_started",
                                    f"mur run could not be started ({exc})") from None
        finally:
            if self._lifeline is not None:
                self._lifeline.child_fd = -1   # closed by ManagedProcess.start

    async def ready(self) -> None:
        """Read the readiness line and the operator token: the child holds the task."""
        assert self._process is not None
        self._stdout = await self._process.stdout_reader()
        try:
            line = await read_line(self._stdout, READY_SECONDS)
        except (TimeoutError, ValueError):
            line = None
        ready = _ready_line(line)
        if ready is None:
            status = await self._stopped()
            raise DelegationRefused(self.capsule, "not_started", _why_not_ready(status))
        self.session_id = str(ready.get("session_id") or "") or None
        self.task_id = str(ready.get("task_id") or "") or None
        self._door_url = str(ready.get("door_url") or "")
        with contextlib.suppress(OSError):
            token_file = Path(str(ready.get("records_dir"))) / "operator.token"
            self._token = token_file.read_text(encoding="utf-8").strip()
        self.state = "held"
        self.held.set()

    # --- its run ----------------------------------------------------------------------

    async def run(self, on_status: StatusSink) -> None:
        """Follow the child to its end and settle its answer."""
        follow = asyncio.create_task(self._follow(on_status),
                                     name=f"delegation {self.capsule} stream")
        try:
            answer = await self._read_answer()
            assert self._process is not None
            self.exit_status = await self._process.wait_async()
            descendants.release(self._process.pid)
        except asyncio.CancelledError:
            self._settle(CallFailed(self.member, CALLER_ENDED, "the delegating task ended"))
            raise
        finally:
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(follow, 1.0)
            follow.cancel()
            self.release()
        self._settle(_outcome(self.member, self.exit_status, answer))

    async def _read_answer(self) -> str:
        assert self._stdout is not None
        data = b""
        while len(data) < ANSWER_LIMIT:
            chunk = await self._stdout.read(65536)
            if not chunk:
                break
            data += chunk
        return data.decode("utf-8", errors="replace").rstrip("\n")

    async def _follow(self, on_status: StatusSink) -> None:
        """``SubscribeToTask`` on the child's door: its status messages go into the
        parent's task as they come (its artifacts do not: the answer is the parent's to
        write, docs/delegation.md). A stream that fails, or a task already over, changes
        nothing: the answer comes from the child's exit."""
        if not (self._door_url and self._token and self.task_id):
            return
        import httpx

        from gateway.sse import aevent_data

        body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                "params": {"id": self.task_id}}
        headers = {"Authorization": f"Bearer {self._token}", "A2A-Version": A2A_VERSION,
                   "Accept": "text/event-stream"}
        with contextlib.suppress(httpx.HTTPError, ValueError):
            async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None)) as client, \
                    client.stream("POST", self._door_url, json=body, headers=headers) as reply:
                async for data in aevent_data(reply.aiter_lines()):
                    await _forward(json.loads(data).get("result"), on_status)

    async def cancel(self) -> None:
        """``CancelTask`` on the child's door (its answer then says canceled)."""
        if not (self._door_url and self._token and self.task_id) or self.done():
            return
        import httpx

        body = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask",
                "params": {"id": self.task_id}}
        with contextlib.suppress(httpx.HTTPError):
            async with httpx.AsyncClient(timeout=5.0) as client:
                await client.post(self._door_url, json=body, headers={
                    "Authorization": f"Bearer {self._token}", "A2A-Version": A2A_VERSION})

    def release(self) -> None:
        """Close the spawner lifeline: a child still running winds down. Idempotent."""
        if self._lifeline is not None:
            self._lifeline.close()
            self._lifeline = None
        if self._process is not None and self._process.returncode is not None:
            self._process.close_pipes()

    def fail(self, failure: CallFailed) -> None:
        self._settle(failure)

    def refuse(self, refused: DelegationRefused) -> None:
        self.refusal = refused
        self._settle(CallFailed(self.member, REFUSED, str(refused)))
        self.held.set()

    @property
    def outcome_word(self) -> str:
        """For the ``delegation`` record: ``completed``, ``refused``, the child's final
        state (``failed``, ``canceled``...) or why no answer came."""
        if self.refusal is not None:
            return "refused"
        if self.state.startswith("TASK_STATE_"):
            return state_word(self.state)
        return self.state

    def _settle(self, outcome: str | CallFailed) -> None:
        if self._answer.done():
            return
        if isinstance(outcome, CallFailed):
            self.state = outcome.state
            self._answer.set_exception(outcome)
        else:
            self.state = "completed"
            self._answer.set_result(outcome)

    async def _stopped(self) -> int | None:
        """The exit status of a child that never said it was ready (ended by the
        spawner lifeline when it still runs)."""
        process = self._process
        self.release()
        if process is None:
            return None
        try:
            return await asyncio.wait_for(process.wait_async(), 25.0)
        except TimeoutError:
            process.kill_group()
            return None
        finally:
            descendants.release(process.pid)


def child_environment(environ: Mapping[str, str], formation_id: str | None
                      ) -> dict[str, str]:
    """The runtime's environment for a child: ``MURMUR_FORMATION_ID`` (when the parent
    has one) and nothing else of the formation; no ``MURMUR_*`` variable of the parent's
    own (its lineage, work folder and diagnostics are set for the child afresh), except
    the home and the isolation mode."""
    kept = {name: value for name, value in environ.items()
            if not name.startswith("MURMUR_")
            or name in ("MURMUR_HOME", "MURMUR_ISOLATION")
            or name.startswith("MURMUR_TEST_")}
    if formation_id is not None:
        kept[FORMATION_ENV] = formation_id
    return kept


def task_file_path(records_dir: Path) -> Path:
    return records_dir / "delegations" / f"{uuid.uuid4().hex}.task"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _ready_line(line: bytes | None) -> dict[str, Any] | None:
    if not line:
        return None
    with contextlib.suppress(ValueError):
        data = json.loads(line)
        if isinstance(data, dict) and data.get("event") == "ready":
            return data
    return None


def _why_not_ready(status: int | None) -> str:
    if status is None:
        return f"mur run said nothing within {READY_SECONDS:.0f} s and was stopped"
    return (f"mur run exited with status {status} before it was ready; its diagnostics "
            "are on this member's stderr")


def _outcome(member: str, status: int | None, answer: str) -> str | CallFailed:
    if status == 0:
        return answer
    word, _, detail = answer.partition(": ")
    state = _STATES.get(word)
    if state is None:
        return CallFailed(member, ERROR, f"the child's mur run exited with status {status}"
                          + (f": {answer[:300]}" if answer else ""))
    return CallFailed(member, state, detail)


async def _forward(event: Any, on_status: StatusSink) -> None:
    if not isinstance(event, dict):
        return
    # The subscription's first event is the task as it stands; then its updates.
    update = event.get("statusUpdate") or event.get("task")
    if isinstance(update, dict) and isinstance(update.get("status"), dict):
        status = update["status"]
        message = status.get("message")
        if status.get("state") == TaskState.WORKING and isinstance(message, dict):
            text = parts_text(message.get("parts"))
            if text:
                await on_status(text)
