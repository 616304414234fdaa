"""Child processes and the descriptors between them: the launcher's side and the member's.

The launcher side: :class:`ManagedProcess` starts a child with exactly the descriptors it
must inherit (``close_fds=True`` plus ``pass_fds``), optionally in a process group of its
own, and stops it (``terminate`` sends SIGTERM to the process, ``kill_group`` SIGKILL to
its group). :func:`make_channel_pipe` and :func:`make_lifeline_pipe` make the two pipes a
member is handed; both ends carry ``O_CLOEXEC`` in the parent, so only the child whose
``pass_fds`` names an end ever holds it. :func:`read_line` reads a child's first stdout
line against a deadline and :func:`forward_lines` copies its stderr behind ``[name] ``,
control characters escaped (:func:`escape_control`; :func:`escape_lines` for what
``mur`` prints of an agent's answer, line breaks kept).

The member side: :func:`lifeline_from_env` adopts the inherited lifeline,
:func:`wait_for_eof` waits for the formation to end, :func:`launcher_gone` and
:func:`divert_stderr_to` move a peer's diagnostics to ``logs/bootstrap.log`` once nobody
reads its stderr any more.

Both: :func:`process_start_time` and :func:`pid_alive`, which tell a live process from
a dead one whose pid the kernel has since handed to another,
:func:`forbid_inspection`, which the launcher and every member runtime call first, and
:func:`read_ready`, the one read of a non-blocking descriptor (the channel, the
lifeline, an agent process's output).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import select
import signal
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, TextIO

from launcher.errors import LauncherError
from launcher.spawn.env_names import LIFELINE_ENV

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL

#: The longest line :func:`read_line` accepts and :func:`forward_lines` keeps whole.
MAX_LINE = 64 * 1024



# --------------------------------------------------------------------------- liveness


def _read_stat(pid: int) -> tuple[str, str] | None:
    """(state, starttime) from /proc/<pid>/stat, or None when there is no such entry."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # Field 2 is the command name in parentheses and may itself hold ") ", so the
    # fields that follow start after the LAST closing parenthesis.
    rest = data[data.rfind(b")") + 1:].split()
    if len(rest) < 20:
        return None
    # rest[0] is field 3 (state); field 22 (starttime, clock ticks since boot) is rest[19].
    return rest[0].decode("ascii", "replace"), rest[19].decode("ascii", "replace")


_PR_SET_DUMPABLE = 4


def forbid_inspection() -> bool:
    """``PR_SET_DUMPABLE`` 0 for this process: no other process of the same user may
    ptrace it, read its memory, environment or descriptors through ``/proc``, and no core
    dump is written; the launcher and the member runtime hold the formation's key and
    tokens. It lasts until this process runs another program (an ``execve`` sets it back,
    so each ``mur`` process calls this itself). Whether it was set (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    zero = ctypes.c_ulong(0)
    return int(libc.prctl(ctypes.c_int(_PR_SET_DUMPABLE), zero, zero, zero, zero)) == 0


def process_start_time(pid: int) -> str | None:
    """When ``pid`` started, as the host reports it (field 22 of /proc/<pid>/stat).

    None when it cannot be read: no such process, or no /proc on this host.
    """
    if pid <= 0:
        return None
    stat_fields = _read_stat(pid)
    return None if stat_fields is None else stat_fields[1]


def pid_alive(pid: int, start: str | None) -> bool:
    """True when ``pid`` runs and is the process that started at ``start``.

    A pid whose start time differs was reused by another process: the one recorded is
    gone. A zombie counts as gone. With no ``start`` (it could not be read when it was
    recorded) only the pid's existence is checked.
    """
    if pid <= 0:
        return False
    stat_fields = _read_stat(pid)
    if stat_fields is None:
        if os.path.isdir("/proc/self"):
            return False
        try:  # a host without /proc: existence is all that can be known
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state, started = stat_fields
    if state in ("Z", "X"):
        return False
    return not start or started == start


# --------------------------------------------------------------------------- pipes


@dataclass
class ChildPipe:
    """One pipe between the launcher and one child.

    ``child_fd`` is the end the child inherits: pass it in ``pass_fds``, then close the
    parent's copy (:meth:`ManagedProcess.start` does that). ``parent_fd`` is the end the
    parent keeps. Both are ``O_CLOEXEC`` in the parent, so no other child inherits them.
    Closing is idempotent.
    """

    child_fd: int
    parent_fd: int

    def close_child_end(self) -> None:
        if self.child_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.child_fd)
            self.child_fd = -1

    def close_parent_end(self) -> None:
        if self.parent_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.parent_fd)
            self.parent_fd = -1

    def close(self) -> None:
        self.close_child_end()
        self.close_parent_end()


def _child_reads_pipe() -> ChildPipe:
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    return ChildPipe(child_fd=read_end, parent_fd=write_end)


def make_channel_pipe() -> ChildPipe:
    """The formation channel: the child reads ``child_fd``, the launcher writes
    ``parent_fd`` (hand it to :class:`launcher.spawn.channel.ChannelWriter`)."""
    return _child_reads_pipe()


def make_lifeline_pipe() -> ChildPipe:
    """A lifeline: the child inherits the read end, the launcher holds the write end and
    never writes to it. The child reads end of file exactly when the launcher closes
    ``parent_fd`` or dies, however it dies."""
    return _child_reads_pipe()


def read_ready(fd: int, size: int = 65536) -> bytes | None:
    """What a non-blocking ``fd`` holds now, at most ``size`` bytes. None: nothing to
    read now; ``b""``: end of file (or the descriptor failed, which ends reading it
    just the same)."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError:
        return b""


# --------------------------------------------------------------------------- processes


class PopenLike(Protocol):
    """What :class:`ManagedProcess` uses of a child: ``subprocess.Popen``'s, or a member
    the member template forked (``launcher.formation.template``)."""

    @property
    def pid(self) -> int: ...

    @property
    def stdin(self) -> IO[bytes] | None: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    @property
    def stderr(self) -> IO[bytes] | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


@dataclass
class ManagedProcess:
    """A started child. Build it with :meth:`start` (or from another ``PopenLike``)."""

    popen: PopenLike
    name: str
    own_group: bool
    _transports: list[asyncio.BaseTransport] = field(default_factory=list, repr=False)

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str],
        env: Mapping[str, str],
        pass_fds: Sequence[int] = (),
        new_process_group: bool = False,
        stdin: int | None = DEVNULL,
        stdout: int | None = PIPE,
        stderr: int | None = PIPE,
        name: str = "",
        close_passed_fds: bool = True,
    ) -> ManagedProcess:
        """Start ``argv`` holding exactly 0, 1, 2 and ``pass_fds``.

        ``stdin``/``stdout``/``stderr`` take ``PIPE``, ``DEVNULL``, a descriptor, or None
        to share the parent's. ``new_process_group`` puts the child in a group of its own
        (a peer); otherwise it stays in the parent's (the entry member). The parent's
        copies of ``pass_fds`` are closed once the child holds them, unless
        ``close_passed_fds`` is false.
        """
        try:
            popen = subprocess.Popen(  # noqa: S603 - argv is built by the launcher
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                close_fds=True,
                pass_fds=tuple(pass_fds),
                process_group=0 if new_process_group else None,
            )
        finally:
            if close_passed_fds:
                for fd in pass_fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        return cls(popen=popen, name=name, own_group=new_process_group)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the child ended (reaping it), else None. A child ended
        by a signal has ``-signum``, as subprocess reports it."""
        return self.popen.poll()

    @property
    def stdout(self) -> IO[bytes] | None:
        return self.popen.stdout

    @property
    def stderr(self) -> IO[bytes] | None:
        return self.popen.stderr

    def send_signal(self, signum: int) -> None:
        """Signal the process itself, never a pid that was already reaped."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signum)

    def terminate(self) -> None:
        """SIGTERM to the process (not its group)."""
        self.send_signal(signal.SIGTERM)

    def kill_group(self) -> None:
        """SIGKILL to the child's process group when it has its own, else to the child.

        The group is signalled even after the leader ended, so whatever the child left
        behind in it goes too.
        """
        if self.own_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        else:
            self.send_signal(signal.SIGKILL)

    def join(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds (None: forever); the exit status or None."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    async def wait_async(self) -> int:
        """Wait for the child to end without blocking the event loop, and reap it."""
        code = self.popen.poll()
        if code is not None:
            return code
        try:
            pidfd = os.pidfd_open(self.popen.pid)
        except (OSError, AttributeError):
            return await self._poll_until_ended()
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def on_exit() -> None:
            if not ended.done():
                ended.set_result(None)

        try:
            loop.add_reader(pidfd, on_exit)
            try:
                if self.popen.poll() is None:  # it may have ended before add_reader
                    await ended
            finally:
                loop.remove_reader(pidfd)
        finally:
            os.close(pidfd)
        return self.popen.wait()

    async def _poll_until_ended(self) -> int:
        while (code := self.popen.poll()) is None:
            await asyncio.sleep(0.05)
        return code

    async def stdout_reader(self) -> asyncio.StreamReader:
        """The child's stdout as an asyncio stream (``stdout=PIPE`` is required)."""
        if self.popen.stdout is None:
            raise ValueError(f"{self.name or self.pid}: stdout was not started as a pipe")
        return await self._stream(self.popen.stdout)

    async def stderr_reader(self) -> asyncio.StreamReader:
        """The child's stderr as an asyncio stream (``stderr=PIPE`` is required)."""
        if self.popen.stderr is None:
            raise ValueError(f"{self.name or self.pid}: stderr was not started as a pipe")
        return await self._stream(self.popen.stderr)

    async def _stream(self, pipe: IO[bytes]) -> asyncio.StreamReader:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_LINE, loop=loop)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe
        )
        self._transports.append(transport)
        return reader

    def close_pipes(self) -> None:
        """Close the parent's ends of the child's stdin/stdout/stderr pipes."""
        for transport in self._transports:
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                transport.close()
        self._transports.clear()
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


# --------------------------------------------------------------------------- stdout, stderr


class LineTooLong(LauncherError, ValueError):
    """A child wrote more than :data:`MAX_LINE` bytes without a newline."""


async def read_line(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    """The next line (without its newline) within ``timeout`` seconds.

    None when the stream ended before any byte of a line; the bytes written so far when
    it ended in the middle of one. Raises TimeoutError past the deadline and
    :class:`LineTooLong` for a line over :data:`MAX_LINE` bytes.
    """
    try:
        async with asyncio.timeout(timeout):
            line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial or None
    except asyncio.LimitOverrunError as exc:
        raise LineTooLong(f"a line longer than {MAX_LINE} bytes") from exc
    return line[:-1]


async def drain(reader: asyncio.StreamReader) -> None:
    """Read and drop everything until end of file, so the child never blocks writing."""
    while await reader.read(MAX_LINE):
        pass


# Control characters, line/paragraph separators and bidirectional overrides: anything
# that could move the cursor, rewrite a line or make one diagnostic pose as another.
_UNSAFE = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_control(text: str) -> str:
    """``text`` with every control character except tab written as an escape."""
    return _UNSAFE.sub(_escape_char, text)


def escape_lines(text: str) -> str:
    """Multi-line ``text`` (an agent's answer) as :func:`escape_control` writes each of
    its lines, the line breaks kept: every other control character is an escape, a
    carriage return too (what follows it would overwrite its line: a forged ``[mur
    run]``), except one that ends a line (dropped, as :func:`format_forwarded` drops it)."""
    return "\n".join(escape_control(line.removesuffix("\r")) for line in text.split("\n"))


def format_forwarded(name: str, raw: bytes) -> str:
    """One child's stderr line as the launcher prints it: ``[name] text\\n``."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return f"[{name}] {escape_control(raw.decode('utf-8', 'replace'))}\n"


async def forward_lines(reader: asyncio.StreamReader, name: str, sink: TextIO) -> None:
    """Copy ``reader`` to ``sink`` line by line behind ``[name] `` until end of file.

    A line longer than :data:`MAX_LINE` is cut into pieces of that size, each its own
    line. When ``sink`` can no longer be written the stream is still drained to its end,
    so the child never blocks on a full pipe.
    """
    pending = b""
    sink_ok = True

    def emit(raw: bytes) -> None:
        nonlocal sink_ok
        if not sink_ok:
            return
        try:
            sink.write(format_forwarded(name, raw))
            sink.flush()
        except (OSError, ValueError):
            sink_ok = False

    while chunk := await reader.read(MAX_LINE):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            emit(line)
        while len(pending) >= MAX_LINE:
            emit(pending[:MAX_LINE])
            pending = pending[MAX_LINE:]
    if pending:
        emit(pending)


# --------------------------------------------------------------------------- member side


def inherited_fd(environ: Mapping[str, str], name: str) -> int | None:
    """The descriptor number an environment variable names; None when it is unset.

    Raises ValueError with a sentence naming the variable when it is set but is not a
    plain decimal number.
    """
    value = environ.get(name)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"{name} is not a file descriptor number")
    return int(value)


def lifeline_from_env(environ: Mapping[str, str], name: str = LIFELINE_ENV) -> int | None:
    """The member's lifeline from ``MURMUR_FORMATION_LIFELINE`` (or a delegated child's
    from ``name``, ``MURMUR_SPAWNER_LIFELINE``); None when unset.

    Makes it non-inheritable, so the member's own children never hold the formation
    open. Raises ValueError (naming the variable) when it is not the number of an open
    pipe.
    """
    fd = inherited_fd(environ, name)
    if fd is None:
        return None
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        raise ValueError(f"{name} names descriptor {fd}, which is not open") from None
    if not stat.S_ISFIFO(mode):
        raise ValueError(f"{name} names descriptor {fd}, which is not a pipe")
    os.set_inheritable(fd, False)
    return fd


def is_eof(fd: int) -> bool:
    """True when reading ``fd`` now would report end of file (the lifeline closed).
    Reads (and drops) whatever else is waiting, which on a lifeline is nothing."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(0):
        return False
    return read_ready(fd, 4096) == b""


async def wait_for_eof(fd: int) -> None:
    """Return when ``fd`` (a pipe) reaches end of file, without blocking the loop.

    Anything written to it is read and ignored: only end of file ends the wait.
    """
    loop = asyncio.get_running_loop()
    closed: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        if read_ready(fd, 4096) == b"" and not closed.done():
            closed.set_result(None)

    loop.add_reader(fd, on_readable)
    try:
        await closed
    finally:
        loop.remove_reader(fd)


def launcher_gone(launcher_pid: int) -> bool:
    """True once the process that started this one has ended: the member was handed
    to another parent. Take ``launcher_pid`` from ``os.getppid()`` at start."""
    return os.getppid() != launcher_pid


def divert_stderr_to(path: str | os.PathLike[str]) -> None:
    """Send everything this process writes to stderr from now on to ``path`` (appended,
    created at mode 0600 with its folder), for a peer whose launcher is gone: its
    ``logs/bootstrap.log``. Descriptor 2 itself is replaced, so Python's ``sys.stderr``,
    logging and any native code all follow."""
    target = Path(path)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(
        target,
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
        0o600,
    )
    try:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(fd, 2)
    finally:
        os.close(fd)
