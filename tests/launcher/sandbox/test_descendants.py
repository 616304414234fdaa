"""launcher.sandbox.descendants in a process of its own (each scenario is a script run by
``python -c``: being a child subreaper, and ending what is below, is never done to the
test runner): orphans are reaped without reading ``/proc``, an owned child's status is
left to its starter, and ending the tree stops a process that changes its pid as fast as
it can fork.

The member-level checks (a daemon ends with its member, a process forking every 2 ms
slows neither the door nor ``mur stop``) are in tests/integration/test_descendants.py and
tests/integration/test_hopping_process.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import crowd

REPO = Path(__file__).resolve().parents[3]

if not sys.platform.startswith("linux"):
    pytest.skip("a child subreaper is Linux's", allow_module_level=True)

COMMON = r'''
import json, os, select, time
from launcher.sandbox import descendants


def zombies():
    """This process's ended children not reaped yet (read by the test, not the code)."""
    me, count = os.getpid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = open(f"/proc/{name}/stat", "rb").read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            count += fields[0] == b"Z" and int(fields[1]) == me
    return count


def until(predicate, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.005)


def orphans(count):
    """``count`` grandchildren that end at once, each orphaned by its parent ending."""
    for _ in range(count):
        middle = os.fork()
        if middle == 0:
            if os.fork() == 0:
                os._exit(0)
            os._exit(0)


def walked(*args, **kwargs):
    raise AssertionError("/proc was walked")
'''


def scenario(body: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", COMMON + textwrap.dedent(body)], cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, capture_output=True,
        text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_orphans_are_reaped_without_walking_proc_and_an_owned_childs_status_is_kept() -> None:
    result = scenario(r'''
        with descendants.owning_descendants():
            owned = os.fork()  # first in line: waitid names it before every orphan
            if owned == 0:
                os._exit(7)
            descendants.own(owned)
            orphans(50)
            until(lambda: zombies() == 101)  # the owned child, 50 parents, 50 orphans
            descendants._table, table = walked, descendants._table
            more = descendants.reap_orphans()
            held = zombies()  # nothing reaped past the owned child
            _, status = os.waitpid(owned, 0)  # its starter still gets its status
            descendants.release(owned)  # and the orphans behind it are reaped then
            left = zombies()
            descendants._table = table  # the ending walks it
        print(json.dumps({"more": more, "held": held, "status": status, "left": left}))
    ''')
    assert result == {"more": False, "held": 101, "status": 7 << 8, "left": 0}


def test_a_flood_is_reaped_in_batches_that_hand_the_loop_back() -> None:
    result = scenario(r'''
        with descendants.owning_descendants():
            orphans(200)
            until(lambda: zombies() == 400)
            descendants._table, table = walked, descendants._table
            first = descendants.reap_orphans()
            after_first = zombies()
            second = descendants.reap_orphans()
            left = zombies()
            descendants._table = table  # the ending walks it
        print(json.dumps({"first": first, "after_first": after_first, "second": second,
                          "left": left}))
    ''')
    assert result == {"first": True, "after_first": 400 - 256, "second": False, "left": 0}


def test_no_orphan_is_reaped_while_a_child_starts_and_they_are_reaped_after() -> None:
    result = scenario(r'''
        with descendants.owning_descendants():
            with descendants.starting():
                orphans(10)
                until(lambda: zombies() == 20)
                descendants.reap_orphans()
                during = zombies()
            after = zombies()
        print(json.dumps({"during": during, "after": after}))
    ''')
    assert result == {"during": 20, "after": 0}


def test_ending_the_tree_stops_a_process_that_changes_its_pid_as_fast_as_it_forks() -> None:
    """A double-forked, setsid process forks, and its parent exits, without pause: on a
    busy machine (a thousand processes more) its pid is stale by the time a walk of
    /proc kills it. Its session holds nothing else, so its process group is killed in
    one call, a fork under way with it."""
    with crowd(1000):
        result = scenario(r'''
            with descendants.owning_descendants():
                hops, hop_end = os.pipe()
                if os.fork() == 0:
                    os.close(hops)
                    os.setsid()
                    until_ = time.monotonic() + 30  # bounded: it stops by itself
                    while time.monotonic() < until_:
                        if os.fork() != 0:
                            os._exit(0)  # the parent ends, the child goes on: a new pid
                        os.write(hop_end, b".")
                    os._exit(0)
                os.close(hop_end)
                seen = 0
                while seen < 200:  # it hopped 200 times
                    seen += len(os.read(hops, 200 - seen))
                started = time.monotonic()
                killed = descendants.end_descendants()
                took = time.monotonic() - started
                # every holder of the pipe's write end is gone when it reads end of file
                deadline, gone = time.monotonic() + 2, False
                while not gone and select.select([hops], [], [],
                                                 max(0, deadline - time.monotonic()))[0]:
                    gone = os.read(hops, 65536) == b""
            print(json.dumps({"gone": gone, "took": took, "killed": len(killed) > 0,
                              "bound": descendants.END_SECONDS}))
        ''')
    assert result["gone"], "the hopping process outlived the ending"
    assert result["killed"]
    assert result["took"] < result["bound"], "the ending ran out its time"
