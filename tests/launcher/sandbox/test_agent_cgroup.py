"""launcher.sandbox.agent_cgroup on a real cgroup v2, where this user may make one (root here;
an ordinary user gets none, which the first test checks is said, not failed)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.ids import new_session_id
from launcher.sandbox.agent_cgroup import PREFIX, AgentCgroup, cgroup_root, end_left_over


@pytest.fixture
def root() -> Iterator[Path]:
    found = cgroup_root()
    if found is None:
        pytest.skip("no cgroup v2 is mounted here")
    probe = AgentCgroup.make(new_session_id(), found)
    if probe is None:
        pytest.skip(f"this user may not make a cgroup under {found}")
    probe.remove()
    yield found


def test_a_cgroup_holds_what_is_put_in_it_and_ends_it_whole(root: Path) -> None:
    cgroup = AgentCgroup.make(new_session_id(), root)
    assert cgroup is not None
    # it starts its children only once told, after it was put in the cgroup
    sleeper = subprocess.Popen(["sh", "-c", "read go; sleep 60 & sleep 60 & wait"],
                               stdin=subprocess.PIPE)
    try:
        assert cgroup.add(sleeper.pid)
        assert sleeper.stdin is not None
        sleeper.stdin.write(b"go\n")
        sleeper.stdin.flush()
        time.sleep(0.3)  # its children are born in it
        held = (cgroup.path / "cgroup.procs").read_text().split()
        assert str(sleeper.pid) in held and len(held) == 3
        assert cgroup.kill() == frozenset(int(pid) for pid in held)
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
        assert not cgroup.populated()
    finally:
        cgroup.remove()
        if sleeper.poll() is None:
            sleeper.kill()
    assert not cgroup.path.exists()


def test_a_new_cgroup_sweeps_the_empty_ones_of_sessions_gone_long_ago(root: Path) -> None:
    gone = root / f"{PREFIX}{new_session_id()}"
    fresh = root / f"{PREFIX}{new_session_id()}"
    gone.mkdir()
    fresh.mkdir()
    old = time.time() - 3600
    os.utime(gone, (old, old))
    made = AgentCgroup.make(new_session_id(), root)
    try:
        assert made is not None
        assert not gone.exists()  # empty, an hour old, its session not running
        assert fresh.exists()     # empty but just made: its session may be starting
    finally:
        for path in (gone, fresh):
            if path.exists():
                path.rmdir()
        if made is not None:
            made.remove()


def test_the_launcher_ends_its_members_cgroups_left_over(root: Path) -> None:
    session = new_session_id()
    cgroup = AgentCgroup.make(session, root)
    assert cgroup is not None
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        assert cgroup.add(sleeper.pid)
        assert end_left_over([session, new_session_id()], root) == 1
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
        assert not cgroup.path.exists()
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
