"""Signals, the lifeline watchdog and the protocol stdout of a member, in-process."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from launcher.member.shutdown import (
    FORCED_EXIT,
    LIFELINE_GRACE,
    ProtocolOut,
    SignalGuard,
    Watchdog,
    lifeline_grace,
)


async def test_the_first_sigterm_starts_the_wind_down_and_the_second_exits_143() -> None:
    loop = asyncio.get_running_loop()
    firsts: list[int] = []
    exits: list[int] = []
    guard = SignalGuard(loop, firsts.append, exit_fn=exits.append)
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.05)
        assert firsts == [signal.SIGTERM] and exits == []
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.05)
        assert exits == [FORCED_EXIT] and firsts == [signal.SIGTERM]
    finally:
        guard.restore()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


async def test_without_a_lifeline_sigint_and_sighup_count_as_sigterm() -> None:
    loop = asyncio.get_running_loop()
    firsts: list[int] = []
    exits: list[int] = []
    guard = SignalGuard(loop, firsts.append, exit_fn=exits.append)
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.05)
    finally:
        guard.restore()
    assert firsts == [signal.SIGINT] and exits == [FORCED_EXIT]


async def test_with_a_lifeline_sigint_and_sighup_are_left_to_the_launcher() -> None:
    loop = asyncio.get_running_loop()
    firsts: list[int] = []
    guard = SignalGuard(loop, firsts.append, with_interrupts=False, exit_fn=firsts.append)
    guard.install()
    try:
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt, no wind-down
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.05)
        assert firsts == []
        # a handler, not SIG_IGN: the processes the agent starts do not inherit it
        assert signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.SIG_DFL)
    finally:
        guard.restore()


async def test_a_flood_of_sigchld_runs_on_child_once_per_turn_of_the_loop() -> None:
    """A process forking every few milliseconds sends hundreds of SIGCHLD a second: the
    reaper runs once for all that came meanwhile, and again at once while it says more
    may be left."""
    loop = asyncio.get_running_loop()
    runs: list[int] = []
    left = [2]  # the first run leaves more behind, so does the second, not the third

    def on_child() -> bool:
        runs.append(1)
        left[0] -= 1
        return left[0] >= 0

    guard = SignalGuard(loop, lambda signum: None, exit_fn=lambda code: None,
                        on_child=on_child)
    guard.install()
    try:
        for _ in range(50):  # the loop does not turn meanwhile
            os.kill(os.getpid(), signal.SIGCHLD)
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(runs) == 3
        os.kill(os.getpid(), signal.SIGCHLD)
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(runs) == 4
    finally:
        guard.restore()


def test_the_watchdog_exits_143_after_its_grace_unless_disarmed() -> None:
    fired = threading.Event()
    codes: list[int] = []

    def record(code: int) -> None:
        codes.append(code)
        fired.set()

    watchdog = Watchdog(0.05, exit_fn=record)
    started = time.monotonic()
    watchdog.arm()
    watchdog.arm()  # once only
    assert fired.wait(2)
    assert codes == [FORCED_EXIT] and time.monotonic() - started >= 0.05
    quiet = Watchdog(0.05, exit_fn=record)
    quiet.arm()
    quiet.disarm()
    time.sleep(0.15)
    assert codes == [FORCED_EXIT]


@pytest.mark.parametrize(("value", "grace"), [
    (None, LIFELINE_GRACE), ("1", 1.0), ("0.25", 0.25), ("0", LIFELINE_GRACE),
    ("99", LIFELINE_GRACE), ("soon", LIFELINE_GRACE)])
def test_the_lifeline_grace_is_20_s_unless_a_test_shortens_it(value: str | None,
                                                               grace: float) -> None:
    environ = {} if value is None else {"MURMUR_TEST_LIFELINE_GRACE": value}
    assert lifeline_grace(environ) == grace


def test_only_the_readiness_line_and_result_reach_stdout() -> None:
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    fake_stdout = os.dup(out_write)  # stands in for descriptor 1
    try:
        out = ProtocolOut(stdout_fd=fake_stdout, stderr_fd=err_write)
        os.write(fake_stdout, b"agent noise\n")  # what a print() in agent code does
        assert out.line('{"event":"ready"}')
        assert out.line("result\n")
        out.close()
        os.close(out_write)
        os.close(fake_stdout)
        os.close(err_write)
        assert os.read(out_read, 1000) == b'{"event":"ready"}\nresult\n'
        assert os.read(err_read, 1000) == b"agent noise\n"
    finally:
        for fd in (out_read, err_read):
            os.close(fd)


def test_a_reader_that_is_gone_does_not_fail_the_member() -> None:
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        out = ProtocolOut(stdout_fd=out_write, stderr_fd=err_write)
        os.close(out_read)
        assert out.line("nobody reads this") is False
        out.close()
    finally:
        for fd in (out_write, err_read, err_write):
            os.close(fd)
