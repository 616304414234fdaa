"""The launcher's side of the member template (``launcher/template.py``): one
warm interpreter per launch that forks each member runtime, so a formation pays the
imports of a member once instead of once per member (docs/launcher.md).

In order: :meth:`MemberTemplate.begin` execs the template afresh (nothing of the
launcher's memory in it), as early in a launch as its environment is known, and
:meth:`MemberTemplate.wait_ready` waits for its ``ready`` (``start`` does both);
:meth:`MemberTemplate.spawn` sends one member's argv, environment, directory and
descriptors and returns a
:class:`ForkedMember`, which ``ManagedProcess`` drives as it drives a ``Popen``: its exit
status comes from the template's ``exited`` message (the template is its parent), and
everything else (signals, the group, ``pidfd`` waiting, pipes) works on its pid as on
any child's. :meth:`MemberTemplate.close` ends the template once every member is gone.

Where the template cannot start (or a test puts a command in front of each member with
``MURMUR_TEST_MEMBER_ARGV_PREFIX``), members are exec'd as before.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from launcher.errors import LauncherError
from launcher.spawn.process import pid_alive

#: How long the template may take to import a member runtime's modules.
READY_SECONDS = 30.0
#: How long one spawn may take to be answered.
SPAWN_SECONDS = 10.0
MESSAGE_BYTES = 1 << 20


class TemplateFailed(LauncherError, OSError):
    """The member template did not start or did not answer (members are exec'd then)."""


class ForkedMember:
    """A member the template forked, as ``ManagedProcess`` sees a ``Popen``."""

    def __init__(self, template: MemberTemplate, pid: int, stdin: IO[bytes] | None,
                 stdout: IO[bytes] | None, stderr: IO[bytes] | None) -> None:
        self._template = template
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._template.pump(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        until = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if until is None else until - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"member {self.pid}", timeout or 0.0)
            if not self._template.pump(0.5 if left is None else min(left, 0.5)):
                if self._template.closed:
                    # The template is gone: its children were handed to init; this one
                    # ends as far as anyone can tell when its pid does.
                    if not pid_alive(self.pid, None):
                        self.returncode = -9
                    else:
                        time.sleep(0.05)
        return self.returncode


class MemberTemplate:
    """The template process and the launcher's end of its socket."""

    def __init__(self, process: subprocess.Popen[bytes], sock: socket.socket,
                 environ: Mapping[str, str] | None = None) -> None:
        self._process = process
        self._sock = sock
        #: The template's own environment: a spawn sends only what differs from it.
        self._environ = dict(environ or {})
        self._members: dict[int, ForkedMember] = {}
        self._exits: dict[int, int] = {}
        self._spawned: dict[int, dict[str, Any]] = {}
        self._ids = 0
        self.closed = False

    @classmethod
    def start(cls, environ: Mapping[str, str]) -> MemberTemplate:
        """Exec the template and wait for it to be ready; TemplateFailed otherwise."""
        return cls.begin(environ).wait_ready()

    @classmethod
    def begin(cls, environ: Mapping[str, str]) -> MemberTemplate:
        """Exec the template and return at once: it imports a member's modules while the
        launcher goes on (admits the roster); :meth:`wait_ready` before the first spawn.
        TemplateFailed when it cannot be exec'd."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = subprocess.Popen(  # noqa: S603 - our own module
                [sys.executable, "-m", "launcher.template", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=dict(environ), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, close_fds=True)
        except OSError as exc:
            ours.close()
            raise TemplateFailed(f"the member template cannot start: {exc}") from None
        finally:
            theirs.close()
        return cls(process, ours, environ)

    def wait_ready(self) -> MemberTemplate:
        """This template, once it said it is ready; TemplateFailed (and closed) when it
        does not within ``READY_SECONDS``."""
        message = self._receive(READY_SECONDS)
        if message is None or message.get("op") != "ready":
            self.close()
            raise TemplateFailed("the member template did not get ready")
        return self

    def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
              own_group: bool, stdin: int, stdout: int, stderr: int,
              channel: int, lifeline: int, channel_env: str, lifeline_env: str
              ) -> ForkedMember:
        """Fork one member; the caller keeps (and closes) its descriptors."""
        self._ids += 1
        # Only what differs from the template's own environment travels: a credential a
        # variable holds (a declared bearer's) is in the template's environment from its
        # start, where its agent processes' scrub finds it, and never in a message.
        changed = {name: value for name, value in env.items()
                   if self._environ.get(name) != value}
        removed = [name for name in self._environ if name not in env]
        request = {"op": "spawn", "id": self._ids, "argv": list(argv), "cwd": cwd,
                   "env": changed, "unset": removed, "own_group": own_group,
                   "slots": ["stdin", "stdout", "stderr", "channel", "lifeline"],
                   "channel_env": channel_env, "lifeline_env": lifeline_env}
        try:
            socket.send_fds(self._sock, [json.dumps(request).encode()],
                            [stdin, stdout, stderr, channel, lifeline])
        except OSError as exc:
            raise TemplateFailed(f"the member template is gone: {exc}") from None
        until = time.monotonic() + SPAWN_SECONDS
        while self._ids not in self._spawned:
            left = until - time.monotonic()
            if left <= 0 or (not self.pump(left) and self.closed):
                raise TemplateFailed("the member template did not answer")
        answer = self._spawned.pop(self._ids)
        if "pid" not in answer:
            raise TemplateFailed(f"the member template could not fork: {answer.get('error')}")
        pid = int(answer["pid"])
        member = ForkedMember(self, pid, None, None, None)
        self._members[pid] = member
        if pid in self._exits:
            member.returncode = self._exits.pop(pid)
        return member

    def pump(self, timeout: float) -> bool:
        """Read what the template said within ``timeout`` seconds; whether anything."""
        message = self._receive(timeout)
        if message is None:
            return False
        while message is not None:
            self._dispatch(message)
            message = self._receive(0.0)
        return True

    def _dispatch(self, message: dict[str, Any]) -> None:
        if message.get("op") == "spawned":
            self._spawned[int(message.get("id", 0))] = message
        elif message.get("op") == "exited":
            pid, status = int(message["pid"]), int(message["status"])
            member = self._members.get(pid)
            if member is None:
                self._exits[pid] = status
            else:
                member.returncode = status

    def _receive(self, timeout: float) -> dict[str, Any] | None:
        if self.closed:
            return None
        ready, _, _ = select.select([self._sock], [], [], max(0.0, timeout))
        if not ready:
            return None
        try:
            data = self._sock.recv(MESSAGE_BYTES)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return None
        message: dict[str, Any] = json.loads(data)
        return message

    def abandon(self) -> None:
        """End a template that forked nobody at once, ready or still importing (a refused
        launch does not wait for its imports)."""
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(OSError):
            self._process.kill()
        self._process.wait(timeout=5)

    def close(self) -> None:
        """End the template (its members, if any are left, are handed to init)."""
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=5)
