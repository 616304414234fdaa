"""Agent code that leaves a daemon behind (no tests here): the source of ``daemon(pidfile)``,
which forks, calls ``setsid()``, forks again and writes the daemon's pid, so no process
group, session or parent-death signal reaches it; put in front of an agent's or an
upstream's own source. ``HOPPER_SOURCE``: ``hopper(folder)``, such a daemon that leaves
an orphan behind every 2 ms (tests/integration/test_hopping_process.py). :func:`crowd`:
idle processes that make this machine busy (a walk of ``/proc`` costs in proportion to
every process on it)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def crowd(count: int) -> Iterator[None]:
    """``count`` idle processes more while the block runs."""
    shell = subprocess.Popen(
        ["sh", "-c", f"i=0; while [ $i -lt {count} ]; do sleep 900 & i=$((i+1)); done; "
                     "echo ready; wait"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, process_group=0)
    assert shell.stdout is not None
    try:
        assert shell.stdout.readline() == b"ready\n"
        yield
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(timeout=30)
        shell.stdout.close()


DAEMON_SOURCE = r'''
import os, time


def daemon(pidfile):
    """Fork, setsid, fork again; the daemon's pid once it wrote it."""
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            with open(pidfile + ".part", "w") as handle:
                handle.write(str(os.getpid()))
            os.rename(pidfile + ".part", pidfile)
            while True:
                time.sleep(1)
        os._exit(0)
    os.waitpid(first, 0)
    for _ in range(1000):
        if os.path.exists(pidfile):
            return int(open(pidfile).read())
        time.sleep(0.01)
    raise TimeoutError("the daemon wrote no pid")
'''

HOPPER_SOURCE = r'''
import os, time


def hopper(folder, seconds=60.0, flooding_after=500):
    """Fork, setsid, fork again (as daemon() does); the hopper then forks a child every
    2 ms that forks its own child and exits at once, so that grandchild, which exits at
    once too, is an orphan: re-parented to the member's runtime, which reaps it. It
    writes ``hopper.pid`` into ``folder``, then ``flooding`` once it left
    ``flooding_after`` orphans (how many it left a second), and stops by itself after
    ``seconds``. Its pid."""
    pidfile = os.path.join(folder, "hopper.pid")
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            with open(pidfile + ".part", "w") as handle:
                handle.write(str(os.getpid()))
            os.rename(pidfile + ".part", pidfile)
            began = time.monotonic()
            until, orphans = began + seconds, 0
            while time.monotonic() < until:
                child = os.fork()
                if child == 0:
                    if os.fork() == 0:
                        os._exit(0)
                    os._exit(0)
                os.waitpid(child, 0)
                orphans += 1
                if orphans == flooding_after:  # how many it left a second, so far
                    with open(os.path.join(folder, "flooding.part"), "w") as handle:
                        handle.write(str(orphans / (time.monotonic() - began)))
                    os.rename(os.path.join(folder, "flooding.part"),
                              os.path.join(folder, "flooding"))
                time.sleep(0.002)
            os._exit(0)
        os._exit(0)
    os.waitpid(first, 0)
    for _ in range(1000):
        if os.path.exists(pidfile):
            return int(open(pidfile).read())
        time.sleep(0.01)
    raise TimeoutError("the hopper wrote no pid")
'''
