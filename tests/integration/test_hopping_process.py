"""A process that forks every 2 ms costs its member little (docs/isolation.md,
"Processes"): real ``mur run --roster`` formations, as root and as an ordinary user, whose
one member's agent starts a hopper: a double-forked, ``setsid`` daemon that leaves an
orphan behind every 2 ms (each re-parented to the member's runtime, which reaps it) and
stops by itself after 60 s.

The machine is made busy first, with a thousand idle processes more: a runtime that
walked all of ``/proc`` for each orphan's exit spent more than a second of work per
second there, and fell further behind each second. The same formation then runs twice,
without the hopper and with it. With it, a trivial task at the same door still answers
within 1 s, the runtime keeps no pile of zombies, ``mur stop`` takes no longer than
without it (a few seconds of slack for a shared machine), and the hopper is gone once
the formation is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.daemon import HOPPER_SOURCE, crowd
from tests.support.formation import (
    alive,
    install_capsule,
    kill_group_quietly,
    launcher_env,
    read_formation_line,
    wait_gone,
    write_capsule,
    write_roster,
)
from tests.support.member import wait_for
from tests.support.users import Owner, ordinary_user, scratch_folder

pytestmark = pytest.mark.integration

AGENT = HOPPER_SOURCE + r'''


async def run(task):
    if task.text == "hop":
        return str(hopper(task.tmp))
    return "pong"
'''

#: Idle processes that make this machine as busy as the one the slowdown was seen on.
CROWD = 1000
#: The slack `mur stop` gets over its time without the hopper (a shared machine).
STOP_SLACK = 3.0


@dataclass
class Run:
    """What one launch of the formation measured."""

    task_seconds: float
    stop_seconds: float
    #: The runtime's zombie children right after the trivial task (none are piling up).
    zombies: int
    #: Whether the hopper was still there 1 s after the launcher ended.
    hopper_survived: bool
    #: The launcher's exit status (0: every member wound down in time).
    status: int
    #: Orphans the hopper left a second (0 without it).
    rate: float = 0.0


@pytest.fixture
def busy_machine() -> Iterator[None]:
    with crowd(CROWD):
        yield


@pytest.mark.parametrize("who", ["root", "ordinary user"])
def test_a_process_forking_every_2_ms_slows_neither_the_door_nor_mur_stop(
        who: str, busy_machine: None) -> None:
    with scratch_folder() as folder:
        if who == "root":
            if os.getuid() != 0:
                pytest.skip("this variant runs as root; the ordinary-user one runs here")
            quiet, hopping = both_runs(folder, Owner(0, 0))
        else:
            with ordinary_user(folder) as owner:
                quiet, hopping = both_runs(folder, owner)
    print(f"without the hopper: task {quiet.task_seconds:.3f}s, mur stop "
          f"{quiet.stop_seconds:.2f}s; with it: task {hopping.task_seconds:.3f}s, mur stop "
          f"{hopping.stop_seconds:.2f}s, {hopping.zombies} zombies, "
          f"{hopping.rate:.0f} orphans a second")
    assert quiet.status == 0
    assert hopping.task_seconds < 1.0, "the hopper's orphans held the door up"
    assert hopping.zombies < 100, "the runtime does not keep up reaping the orphans"
    assert hopping.stop_seconds < quiet.stop_seconds + STOP_SLACK, \
        "the hopper's orphans held `mur stop` up"
    assert hopping.status == 0, "a member did not wind down in time"
    assert not hopping.hopper_survived, "the hopper outlived its formation"


def both_runs(folder: Path, owner: Owner) -> tuple[Run, Run]:
    project, home = folder / "project", folder / "home"
    project.mkdir()
    home.mkdir(mode=0o700)
    install_capsule(project, write_capsule(folder, "hopper", AGENT))
    write_roster(project, [("hopper", True)])
    owner.chown(folder)
    env = launcher_env(MURMUR_HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    return run_formation(project, home, owner, env, hop=False), \
        run_formation(project, home, owner, env, hop=True)


def run_formation(project: Path, home: Path, owner: Owner, env: dict[str, str], *,
                  hop: bool) -> Run:
    """Launch the formation, start the hopper (``hop``), time a trivial task, then time
    ``mur stop`` until the launcher has ended."""
    launcher = subprocess.Popen(
        owner.argv([sys.executable, "-m", "launcher.cli", "run", "--roster", "--json",
                    "--project", str(project)]), cwd=project, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        process_group=0)
    hopper, rate = None, 0.0
    try:
        line = read_formation_line(launcher, timeout=90)
        door = line["members"][0]["door_url"]
        session = running_session(home)
        records = Path(session["records_dir"])
        token = (records / "operator.token").read_text().strip()
        assert ask(door, token, "warm")[1] == "pong"  # the agent process is up
        if hop:
            hopper = int(ask(door, token, "hop")[1])
            flooding = records / "tmp" / "flooding"
            wait_for(flooding.exists, timeout=30)
            rate = float(flooding.read_text())
            assert alive(hopper)
        task_seconds, answer = ask(door, token, "ping")
        assert answer in ("pong", None)  # None: no answer in time
        zombies = zombie_children(int(session["pid"]))
        started = time.monotonic()
        stopped = subprocess.run(
            owner.argv([sys.executable, "-m", "launcher.cli", "stop", line["formation_id"]]),
            cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert stopped.returncode == 0, stopped.stderr
        launcher.communicate(timeout=120)
        stop_seconds = time.monotonic() - started
        survived = hopper is not None and not gone_within(hopper, 1.0)
        return Run(task_seconds, stop_seconds, zombies, survived, launcher.returncode, rate)
    finally:
        if launcher.poll() is None:
            kill_group_quietly(launcher)
            launcher.wait(timeout=30)
        if hopper is not None and alive(hopper):
            os.kill(hopper, signal.SIGKILL)  # never leave it behind


def running_session(home: Path) -> dict[str, str]:
    """The running record of the formation's one member."""
    (record,) = [data for path in (home / "running").glob("*.json")
                 if (data := json.loads(path.read_text())).get("kind") == "session"]
    return record


def ask(door: str, token: str, text: str) -> tuple[float, str | None]:
    """Seconds until the door answered a task with ``text``, and the answer (None when
    there was none within 20 s)."""
    started = time.monotonic()
    try:
        response = httpx.post(
            door + "/", timeout=20.0, headers={"Authorization": f"Bearer {token}",
                                              "A2A-Version": "1.0"},
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER",
                            "parts": [{"text": text}]}}})
    except httpx.TimeoutException:
        return time.monotonic() - started, None
    seconds = time.monotonic() - started
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    return seconds, str(task["artifacts"][0]["parts"][0]["text"])


def zombie_children(parent: int) -> int:
    """How many ended children of ``parent`` wait to be reaped now."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        count += fields[0] == b"Z" and int(fields[1]) == parent
    return count


def gone_within(pid: int, seconds: float) -> bool:
    try:
        wait_gone([pid], seconds)
    except AssertionError:
        os.kill(pid, signal.SIGKILL)  # never leave it behind
        return False
    return True
