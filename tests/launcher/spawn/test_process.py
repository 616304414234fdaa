"""launcher.spawn.process on real child processes and real pipes."""

from __future__ import annotations

import asyncio
import fcntl
import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.spawn.process import (
    DEVNULL,
    MAX_LINE,
    PIPE,
    LineTooLong,
    ManagedProcess,
    divert_stderr_to,
    drain,
    escape_control,
    escape_lines,
    format_forwarded,
    forward_lines,
    inherited_fd,
    is_eof,
    launcher_gone,
    lifeline_from_env,
    make_channel_pipe,
    make_lifeline_pipe,
    pid_alive,
    process_start_time,
    read_line,
    read_ready,
    wait_for_eof,
)

PY = sys.executable

# A child that reports "up" on stdout, then waits for end of file on the descriptor
# named by argv[1] and says "eof".
WAIT_FOR_EOF = textwrap.dedent("""
    import os, sys
    fd = int(sys.argv[1])
    print("up", flush=True)
    while os.read(fd, 4096):
        pass
    print("eof", flush=True)
""")


def start(code: str, *args: str, **kwargs: object) -> ManagedProcess:
    kwargs.setdefault("cwd", os.getcwd())
    kwargs.setdefault("env", dict(os.environ))
    return ManagedProcess.start([PY, "-c", code, *args], **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def procs() -> Iterator[list[ManagedProcess]]:
    started: list[ManagedProcess] = []
    yield started
    for proc in started:
        proc.kill_group()
        proc.join(5)
        proc.close_pipes()


def wait_until(check: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def fd_targets(pid: int) -> dict[int, str]:
    folder = f"/proc/{pid}/fd"
    targets = {}
    for name in os.listdir(folder):
        try:
            targets[int(name)] = os.readlink(f"{folder}/{name}")
        except OSError:
            continue
    return targets


def first_line(proc: ManagedProcess) -> bytes:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


# --------------------------------------------------------------------------- pipes


def test_both_ends_of_each_pipe_are_close_on_exec_in_the_parent() -> None:
    for pipe in (make_channel_pipe(), make_lifeline_pipe()):
        try:
            for fd in (pipe.child_fd, pipe.parent_fd):
                assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
            os.write(pipe.parent_fd, b"x")
            assert os.read(pipe.child_fd, 1) == b"x"  # the child end is the read end
        finally:
            pipe.close()


def test_closing_a_pipe_twice_is_harmless() -> None:
    pipe = make_lifeline_pipe()
    pipe.close()
    pipe.close()
    assert pipe.child_fd == -1 and pipe.parent_fd == -1


# --------------------------------------------------------------------------- inheritance


def test_a_child_holds_exactly_stdio_and_its_pass_fds(procs: list[ManagedProcess]) -> None:
    channel, lifeline = make_channel_pipe(), make_lifeline_pipe()
    stray_r, stray_w = os.pipe()  # inheritable on purpose: close_fds must still drop it
    os.set_inheritable(stray_r, True)
    os.set_inheritable(stray_w, True)
    try:
        child_fds = (channel.child_fd, lifeline.child_fd)
        proc = start(WAIT_FOR_EOF, str(lifeline.child_fd), pass_fds=child_fds,
                     new_process_group=True)
        procs.append(proc)
        assert first_line(proc) == b"up"
        held = fd_targets(proc.pid)
        assert set(held) == {0, 1, 2, *child_fds}
        # The parent's copies of the child's ends were closed by start().
        for fd in child_fds:
            with pytest.raises(OSError):
                os.fstat(fd)
        channel.child_fd = lifeline.child_fd = -1
        # The ends it holds are the very pipes the parent writes to.
        parent_view = fd_targets(os.getpid())
        assert held[child_fds[0]] == parent_view[channel.parent_fd]
        assert held[child_fds[1]] == parent_view[lifeline.parent_fd]
    finally:
        channel.close()
        lifeline.close()
        os.close(stray_r)
        os.close(stray_w)


def test_a_member_never_holds_another_members_channel_or_lifeline(
        procs: list[ManagedProcess]) -> None:
    pipes = {name: (make_channel_pipe(), make_lifeline_pipe()) for name in ("coder", "rev")}
    try:
        for channel, lifeline in pipes.values():
            proc = start(WAIT_FOR_EOF, str(lifeline.child_fd),
                         pass_fds=(channel.child_fd, lifeline.child_fd),
                         new_process_group=True)
            procs.append(proc)
            assert first_line(proc) == b"up"
        parent_view = fd_targets(os.getpid())
        own = {name: {parent_view[c.parent_fd], parent_view[lf.parent_fd]}
               for name, (c, lf) in pipes.items()}
        for proc, name in zip(procs, pipes, strict=True):
            held = set(fd_targets(proc.pid).values())
            other = next(n for n in pipes if n != name)
            assert own[name] <= held
            assert not (own[other] & held)
    finally:
        for channel, lifeline in pipes.values():
            channel.close()
            lifeline.close()


def test_start_can_keep_the_parents_copies_when_asked(procs: list[ManagedProcess]) -> None:
    pipe = make_lifeline_pipe()
    try:
        proc = start(WAIT_FOR_EOF, str(pipe.child_fd), pass_fds=(pipe.child_fd,),
                     close_passed_fds=False)
        procs.append(proc)
        os.fstat(pipe.child_fd)  # still open in the parent
    finally:
        pipe.close()


# --------------------------------------------------------------------------- lifeline


def test_lifeline_reads_eof_when_the_launcher_closes_it(procs: list[ManagedProcess]) -> None:
    lifeline = make_lifeline_pipe()
    proc = start(WAIT_FOR_EOF, str(lifeline.child_fd), pass_fds=(lifeline.child_fd,),
                 new_process_group=True)
    procs.append(proc)
    assert first_line(proc) == b"up"
    assert proc.join(0.2) is None  # holds on while the lifeline is open
    lifeline.close_parent_end()
    assert proc.join(5) == 0
    assert first_line(proc) == b"eof"


LAUNCHER = textwrap.dedent("""
    import os, sys, time
    from launcher.spawn.process import ManagedProcess, make_lifeline_pipe, make_channel_pipe
    lifeline, channel = make_lifeline_pipe(), make_channel_pipe()
    member = ManagedProcess.start(
        [sys.executable, "-c", sys.argv[1], str(lifeline.child_fd), sys.argv[2]],
        cwd=os.getcwd(), env=dict(os.environ),
        pass_fds=(lifeline.child_fd, channel.child_fd), new_process_group=True,
        stdout=None, stderr=None)
    print(member.pid, flush=True)
    time.sleep(60)
""")

MEMBER_MARKS_EOF = textwrap.dedent("""
    import os, sys
    fd, mark = int(sys.argv[1]), sys.argv[2]
    while os.read(fd, 4096):
        pass
    with open(mark + ".part", "w") as out:  # renamed whole: the test never reads it half-made
        out.write("eof")
    os.rename(mark + ".part", mark)
""")


def test_lifeline_reads_eof_when_the_launcher_is_killed(tmp_path: Path,
                                                        procs: list[ManagedProcess]) -> None:
    mark = tmp_path / "mark"
    launcher = start(LAUNCHER, MEMBER_MARKS_EOF, str(mark), new_process_group=True)
    procs.append(launcher)
    member_pid = int(first_line(launcher))
    member_start = process_start_time(member_pid)
    assert pid_alive(member_pid, member_start)
    assert not mark.exists()
    os.kill(launcher.pid, signal.SIGKILL)
    assert launcher.join(5) == -signal.SIGKILL
    assert wait_until(mark.exists), "the member never saw its lifeline close"
    assert mark.read_text() == "eof"
    assert wait_until(lambda: not pid_alive(member_pid, member_start))


def test_a_child_does_not_inherit_another_childs_lifeline_so_eof_still_arrives(
        procs: list[ManagedProcess]) -> None:
    # Start A, then B: if B had inherited A's write end, A would never see EOF.
    first, second = make_lifeline_pipe(), make_lifeline_pipe()
    try:
        a = start(WAIT_FOR_EOF, str(first.child_fd), pass_fds=(first.child_fd,))
        procs.append(a)
        b = start(WAIT_FOR_EOF, str(second.child_fd), pass_fds=(second.child_fd,))
        procs.append(b)
        assert first_line(a) == b"up" and first_line(b) == b"up"
        first.close_parent_end()
        assert a.join(5) == 0
        assert b.join(0.1) is None
    finally:
        first.close()
        second.close()


# --------------------------------------------------------------------------- stopping


def test_terminate_sends_sigterm_to_the_process(procs: list[ManagedProcess]) -> None:
    proc = start("import time; print('up', flush=True); time.sleep(30)")
    procs.append(proc)
    assert first_line(proc) == b"up"
    proc.terminate()
    assert proc.join(5) == -signal.SIGTERM
    assert proc.returncode == -signal.SIGTERM
    proc.terminate()  # after it ended: nothing, and no error


GROUP_PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(child.pid, flush=True)
    signal_ignored = __import__("signal")
    signal_ignored.signal(signal_ignored.SIGTERM, signal_ignored.SIG_IGN)
    time.sleep(60)
""")


def test_kill_group_kills_the_child_and_everything_in_its_group(
        procs: list[ManagedProcess]) -> None:
    proc = start(GROUP_PARENT, new_process_group=True)
    procs.append(proc)
    grandchild = int(first_line(proc))
    assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
    assert os.getpgid(grandchild) == proc.pid
    start_time = process_start_time(grandchild)
    proc.kill_group()
    assert proc.join(5) == -signal.SIGKILL
    assert wait_until(lambda: not pid_alive(grandchild, start_time))


def test_without_its_own_group_kill_group_kills_only_the_child(
        procs: list[ManagedProcess]) -> None:
    proc = start(GROUP_PARENT)
    procs.append(proc)
    grandchild = int(first_line(proc))
    assert os.getpgid(proc.pid) == os.getpgid(0)
    start_time = process_start_time(grandchild)
    try:
        proc.kill_group()
        assert proc.join(5) == -signal.SIGKILL
        time.sleep(0.1)
        assert pid_alive(grandchild, start_time)
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_join_times_out_then_returns_the_status(procs: list[ManagedProcess]) -> None:
    proc = start("import sys, time; time.sleep(0.3); sys.exit(3)")
    procs.append(proc)
    assert proc.join(0.01) is None
    assert proc.returncode is None
    assert proc.join(5) == 3


async def test_wait_async_returns_the_status_without_blocking_the_loop(
        procs: list[ManagedProcess]) -> None:
    proc = start("import sys, time; time.sleep(0.3); sys.exit(7)", stdout=DEVNULL,
                 stderr=DEVNULL)
    procs.append(proc)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        assert await asyncio.wait_for(proc.wait_async(), 5) == 7
    finally:
        ticker.cancel()
    assert ticks >= 5
    assert await proc.wait_async() == 7  # already ended


# --------------------------------------------------------------------------- stdout, stderr


async def test_read_line_reads_the_first_stdout_line(procs: list[ManagedProcess]) -> None:
    proc = start("print('{\"event\":\"ready\"}'); print('more')")
    procs.append(proc)
    reader = await proc.stdout_reader()
    assert await read_line(reader, 5) == b'{"event":"ready"}'
    assert await read_line(reader, 5) == b"more"
    assert await read_line(reader, 5) is None
    await proc.wait_async()


async def test_read_line_gives_none_when_the_child_exits_before_reporting(
        procs: list[ManagedProcess]) -> None:
    proc = start("import sys; sys.exit(1)")
    procs.append(proc)
    assert await read_line(await proc.stdout_reader(), 5) is None
    assert await proc.wait_async() == 1


async def test_read_line_gives_the_partial_line_of_a_child_that_exits_mid_line(
        procs: list[ManagedProcess]) -> None:
    proc = start("import sys; sys.stdout.write('half')")
    procs.append(proc)
    assert await read_line(await proc.stdout_reader(), 5) == b"half"


async def test_read_line_times_out_on_a_silent_child(procs: list[ManagedProcess]) -> None:
    proc = start("import time; time.sleep(30)")
    procs.append(proc)
    reader = await proc.stdout_reader()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await read_line(reader, 0.2)
    assert time.monotonic() - started < 2


async def test_read_line_refuses_an_endless_line(procs: list[ManagedProcess]) -> None:
    proc = start(f"import sys, time; sys.stdout.write('x' * {MAX_LINE * 2}); "
                 "sys.stdout.flush(); time.sleep(30)")
    procs.append(proc)
    with pytest.raises(LineTooLong):
        await read_line(await proc.stdout_reader(), 5)


async def test_stdout_reader_needs_a_pipe(procs: list[ManagedProcess]) -> None:
    proc = start("pass", stdout=DEVNULL)
    procs.append(proc)
    with pytest.raises(ValueError, match="not started as a pipe"):
        await proc.stdout_reader()


def test_escape_control_keeps_tab_and_escapes_the_rest() -> None:
    assert escape_control("a\tb") == "a\tb"
    assert escape_control("\x1b[31mred\x07") == "\\x1b[31mred\\x07"
    assert escape_control("line\nbreak\rback") == "line\\x0abreak\\x0dback"
    assert escape_control("del\x7f c1\x9b") == "del\\x7f c1\\x9b"
    assert escape_control("bidi\u202eevil\u2028") == "bidi\\u202eevil\\u2028"
    assert escape_control("héllo ✓") == "héllo ✓"


def test_escape_lines_keeps_line_breaks_and_escapes_an_osc52_clipboard_write() -> None:
    assert escape_lines("copied\x1b]52;c;aGVsbG8=\x07\n\tnext") == (
        "copied\\x1b]52;c;aGVsbG8=\\x07\n\tnext")
    assert escape_lines("csi \x9b2J osc \x9d0;x\x9c del \x7f") == (
        "csi \\x9b2J osc \\x9d0;x\\x9c del \\x7f")
    # A carriage return could rewrite a line (a forged `[mur run]`): escaped, except one
    # that ends a line, dropped as forwarded lines drop it.
    assert escape_lines("ok\r[mur run] formation ended") == "ok\\x0d[mur run] formation ended"
    assert escape_lines("one\r\ntwo\r") == "one\ntwo"
    assert escape_lines("bidi\u202e\u2028 ✓\n") == "bidi\\u202e\\u2028 ✓\n"
    assert escape_lines("") == ""


def test_format_forwarded_prefixes_and_drops_a_carriage_return() -> None:
    assert format_forwarded("coder", b"hello\r") == "[coder] hello\n"
    assert format_forwarded("coder", b"\xff bad utf8") == "[coder] \ufffd bad utf8\n"


STDERR_WRITER = textwrap.dedent(r"""
    import sys
    sys.stderr.write("plain\n")
    sys.stderr.write("tab\there\r\n")
    sys.stderr.write("\x1b]0;title\x07 spoof\n")
    sys.stderr.write("no newline at end")
""")


async def test_forward_lines_prefixes_each_stderr_line(procs: list[ManagedProcess]) -> None:
    proc = start(STDERR_WRITER, stdout=DEVNULL)
    procs.append(proc)
    sink = io.StringIO()
    await asyncio.wait_for(forward_lines(await proc.stderr_reader(), "coder", sink), 5)
    assert sink.getvalue().splitlines() == [
        "[coder] plain",
        "[coder] tab\there",
        "[coder] \\x1b]0;title\\x07 spoof",
        "[coder] no newline at end",
    ]


async def test_forward_lines_cuts_an_endless_line(procs: list[ManagedProcess]) -> None:
    proc = start(f"import sys; sys.stderr.write('y' * {MAX_LINE + 10} + '\\n')",
                 stdout=DEVNULL)
    procs.append(proc)
    sink = io.StringIO()
    await asyncio.wait_for(forward_lines(await proc.stderr_reader(), "big", sink), 5)
    lines = sink.getvalue().splitlines()
    assert [len(line) for line in lines] == [len("[big] ") + MAX_LINE, len("[big] ") + 10]


class BrokenSink(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError("launcher stderr gone")


async def test_forward_lines_keeps_draining_when_the_sink_breaks(
        procs: list[ManagedProcess]) -> None:
    # 1 MiB of stderr: far more than a pipe holds, so the child blocks unless drained.
    proc = start("import sys\nfor i in range(16384): sys.stderr.write('z' * 63 + '\\n')",
                 stdout=DEVNULL)
    procs.append(proc)
    await asyncio.wait_for(forward_lines(await proc.stderr_reader(), "m", BrokenSink()), 10)
    assert await asyncio.wait_for(proc.wait_async(), 5) == 0


async def test_drain_reads_to_the_end(procs: list[ManagedProcess]) -> None:
    proc = start("import sys\nfor i in range(8192): print('w' * 127)")
    procs.append(proc)
    await asyncio.wait_for(drain(await proc.stdout_reader()), 10)
    assert await asyncio.wait_for(proc.wait_async(), 5) == 0


def test_start_can_share_the_parents_stdio(procs: list[ManagedProcess]) -> None:
    proc = start("pass", stdout=None, stderr=None)
    procs.append(proc)
    assert proc.stdout is None and proc.stderr is None
    assert proc.join(5) == 0


def test_pipe_constant_is_subprocess_pipe() -> None:
    assert PIPE == subprocess.PIPE


# --------------------------------------------------------------------------- liveness


def test_process_start_time_reads_field_22() -> None:
    mine = process_start_time(os.getpid())
    assert mine is not None and mine.isdigit()
    with open(f"/proc/{os.getpid()}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    assert mine == fields[19]
    assert process_start_time(0) is None
    assert process_start_time(-5) is None


def test_pid_alive_tells_a_reused_pid_from_the_process_recorded() -> None:
    mine = process_start_time(os.getpid())
    assert pid_alive(os.getpid(), mine)
    assert pid_alive(os.getpid(), None)  # start unknown: existence only
    assert not pid_alive(os.getpid(), str(int(mine or "0") + 1))
    assert not pid_alive(0, None)


def test_pid_alive_is_false_for_an_ended_and_for_a_zombie_process() -> None:
    child = subprocess.Popen([PY, "-c", "pass"])
    start_time = process_start_time(child.pid)
    assert wait_until(lambda: _state(child.pid) == "Z")
    assert not pid_alive(child.pid, start_time)  # a zombie is gone
    child.wait()
    assert not pid_alive(child.pid, start_time)
    assert process_start_time(child.pid) is None


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_command_name_with_parentheses_and_spaces_does_not_confuse_the_parser(
        tmp_path: Path) -> None:
    odd = tmp_path / "a) b (c"
    odd.symlink_to(PY)
    child = subprocess.Popen([str(odd), "-c", "import time; time.sleep(5)"])
    try:
        assert wait_until(lambda: ") b (c" in (_comm(child.pid) or ""))
        start_time = process_start_time(child.pid)
        assert start_time is not None and start_time.isdigit()
        assert pid_alive(child.pid, start_time)
    finally:
        child.kill()
        child.wait()


def _comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read()
    except OSError:
        return None


# --------------------------------------------------------------------------- member side


def test_inherited_fd_parses_only_plain_numbers() -> None:
    assert inherited_fd({}, "X") is None
    assert inherited_fd({"X": "7"}, "X") == 7
    for bad in ("", "-1", " 7", "7a", "٣"):
        with pytest.raises(ValueError, match="X"):
            inherited_fd({"X": bad}, "X")


def test_lifeline_from_env_adopts_an_open_pipe_and_refuses_anything_else(
        tmp_path: Path) -> None:
    assert lifeline_from_env({}) is None
    read_end, write_end = os.pipe()
    os.set_inheritable(read_end, True)
    try:
        assert lifeline_from_env({"MURMUR_FORMATION_LIFELINE": str(read_end)}) == read_end
        assert not os.get_inheritable(read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    with pytest.raises(ValueError, match="not open"):
        lifeline_from_env({"MURMUR_FORMATION_LIFELINE": str(read_end)})
    with open(tmp_path / "f", "w") as handle:
        with pytest.raises(ValueError, match="not a pipe"):
            lifeline_from_env({"MURMUR_FORMATION_LIFELINE": str(handle.fileno())})
    with pytest.raises(ValueError, match="MURMUR_FORMATION_LIFELINE"):
        lifeline_from_env({"MURMUR_FORMATION_LIFELINE": "three"})


async def test_wait_for_eof_ignores_data_and_returns_on_close() -> None:
    pipe = make_lifeline_pipe()
    try:
        waiter = asyncio.create_task(wait_for_eof(pipe.child_fd))
        os.write(pipe.parent_fd, b"ignored")
        await asyncio.sleep(0.05)
        assert not waiter.done()
        assert not is_eof(pipe.child_fd)
        pipe.close_parent_end()
        await asyncio.wait_for(waiter, 5)
        assert is_eof(pipe.child_fd)
    finally:
        pipe.close()


def test_read_ready_tells_data_from_nothing_yet_from_end_of_file() -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    try:
        assert read_ready(read_end) is None  # nothing written yet
        os.write(write_end, b"abcdef")
        assert read_ready(read_end, 4) == b"abcd"
        assert read_ready(read_end) == b"ef"
        assert read_ready(read_end) is None
        os.close(write_end)
        write_end = -1
        assert read_ready(read_end) == b""  # the writer is gone: end of file
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    assert read_ready(read_end) == b""  # a closed descriptor ends reading it too


def test_launcher_gone_compares_with_the_parent_at_start() -> None:
    assert not launcher_gone(os.getppid())
    assert launcher_gone(os.getppid() + 1)


DIVERTER = textwrap.dedent("""
    import sys
    from launcher.spawn.process import divert_stderr_to
    print("before", file=sys.stderr, flush=True)
    divert_stderr_to(sys.argv[1])
    print("after", file=sys.stderr, flush=True)
    import os; os.write(2, b"native\\n")
""")


def test_divert_stderr_sends_later_diagnostics_to_bootstrap_log(
        tmp_path: Path, procs: list[ManagedProcess]) -> None:
    log = tmp_path / "records" / "logs" / "bootstrap.log"
    proc = start(DIVERTER, str(log), stdout=DEVNULL)
    procs.append(proc)
    assert proc.join(5) == 0
    assert proc.stderr is not None
    assert proc.stderr.read() == b"before\n"
    assert log.read_text() == "after\nnative\n"
    assert log.stat().st_mode & 0o777 == 0o600


def test_divert_stderr_refuses_a_symlinked_log(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    link = tmp_path / "bootstrap.log"
    link.symlink_to(target)
    with pytest.raises(OSError):
        divert_stderr_to(link)
    assert not target.exists()
