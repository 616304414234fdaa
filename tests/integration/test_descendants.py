"""No process agent code starts outlives its member (docs/isolation.md, "Processes"):
real ``mur run`` processes whose agent, or gateway upstream, leaves a daemon behind that
forked twice and called ``setsid()``, so no process group, session or parent-death
signal of ours reaches it.

Each daemon writes its pid into the session's ``tmp/`` (``$TMPDIR`` for an upstream); the
test reads it from outside and checks the process is gone when it must be: when its
member ends (standalone, as root and as an ordinary user; a gateway upstream's), when
the agent process that started it dies while the member goes on, and when the member's
runtime itself is killed with SIGKILL (the launcher ends it with the formation).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import member as support
from tests.support.daemon import DAEMON_SOURCE
from tests.support.formation import (
    alive,
    formation_members,
    install_capsule,
    launcher_env,
    read_formation_line,
    start_launcher,
    wait_gone,
    write_capsule,
    write_roster,
)
from tests.support.gateway_capsules import gateway_capsule
from tests.support.member import Project, project_fixture
from tests.support.third_party import SDK_AGENT
from tests.support.users import Owner, ordinary_user, scratch_folder

pytestmark = pytest.mark.integration

AGENT = DAEMON_SOURCE + r'''
import asyncio


async def run(task):
    if task.text == "stubborn":  # ignores being cancelled: only a second SIGTERM ends it
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                pass
    pid = daemon(os.path.join(task.tmp, f"daemon-{task.id}.pid"))
    if task.text == "die":
        os.kill(os.getpid(), 9)  # the agent process dies; its daemon must not live on
    return str(pid)
'''

UPSTREAM = DAEMON_SOURCE + r'''
import sys

daemon(os.path.join(os.environ["TMPDIR"], "upstream-daemon.pid"))
os.execv(sys.executable, [sys.executable, "sdk_agent.py", *sys.argv[1:]])
'''


def gone_within(pid: int, seconds: float) -> bool:
    try:
        wait_gone([pid], seconds)
    except AssertionError:
        os.kill(pid, signal.SIGKILL)  # never leave it behind
        return False
    return True


def daemon_pids(records: Path) -> list[int]:
    return [int(path.read_text()) for path in (records / "tmp").glob("*daemon*.pid")]


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from project_fixture(tmp_path, murmur_home)


# ------------------------------------------------------------------ a member's own ending


@pytest.mark.parametrize("who", ["root", "ordinary user"])
def test_a_double_forked_setsid_daemon_ends_with_its_standalone_member(who: str) -> None:
    with scratch_folder() as folder:
        if who == "root":
            if os.getuid() != 0:
                pytest.skip("this variant runs as root; the ordinary-user one runs here")
            run_daemon_task(folder, Owner(0, 0))
        else:
            with ordinary_user(folder) as owner:
                run_daemon_task(folder, owner)


def run_daemon_task(folder: Path, owner: Owner) -> None:
    project, home = folder / "project", folder / "home"
    project.mkdir()
    home.mkdir(mode=0o700)
    support.install_capsule(project, support.write_capsule(
        folder / "src" / "spawner", "spawner", agent=AGENT))
    owner.chown(folder)
    env = support.member_env(home, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        owner.argv([sys.executable, "-m", "launcher.cli", "run", "--capsule",
                    "local/spawner", "--capsule-version", "1.0.0", "--project",
                    str(project), "--task", "keep"]),
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.strip().splitlines()[-1])
    # the member has exited: its daemon was ended before it did (a little slack for the
    # kernel to finish tearing it down)
    assert gone_within(pid, 1.0), f"daemon {pid} outlived its member"


def test_a_daemon_ends_when_the_agent_process_that_started_it_dies(project: Project) -> None:
    """The member goes on (its next task gets a new agent process); the daemon does not."""
    project.capsule("spawner", agent=AGENT)
    member = project.run("spawner")
    answer = member.rpc("SendMessage", {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "die"}]}})
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    (pid,) = support.wait_for(lambda: daemon_pids(member.records))
    assert gone_within(pid, 5.0), f"daemon {pid} outlived the agent process"
    assert member.process.poll() is None  # the member itself goes on
    ended = [record for record in member.trace() if record["event"] == "agent_process_ended"]
    assert ended and ended[-1]["descendants_ended"] >= 1
    # and serves the next task with a new agent process
    again = member.rpc("SendMessage", {"message": {
        "messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "keep"}]}})
    kept = int(again["result"]["task"]["artifacts"][0]["parts"][0]["text"])
    assert alive(kept)
    member.signal()
    assert member.wait() == 0
    assert gone_within(kept, 1.0)


def test_a_gateway_upstreams_daemon_ends_with_its_member(project: Project) -> None:
    source = project.path.parent / "src" / "relay"
    source.mkdir(parents=True)
    (source / "sdk_agent.py").write_text(SDK_AGENT.read_text())
    (source / "start.py").write_text(UPSTREAM)
    gateway_capsule(source, "relay", ["python3", "start.py", "--port", "{port}",
                                      "--name", "relay"])
    support.install_capsule(project.path, source)
    member = project.run("relay")
    (pid,) = support.wait_for(lambda: daemon_pids(member.records), timeout=30)
    assert alive(pid)
    member.signal()
    assert member.wait(timeout=30) == 0
    assert gone_within(pid, 1.0), f"the upstream's daemon {pid} outlived its member"


def test_a_daemon_ends_even_when_a_second_sigterm_ends_its_member_at_once(
        project: Project) -> None:
    project.capsule("spawner", agent=AGENT)
    member = project.run("spawner")
    kept = member.rpc("SendMessage", {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "keep"}]}})
    pid = int(kept["result"]["task"]["artifacts"][0]["parts"][0]["text"])
    member.rpc("SendMessage", {"message": {
        "messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "stubborn"}]},
        "configuration": {"returnImmediately": True}})
    member.signal()
    time.sleep(0.5)  # winding down, held by the stubborn task
    assert member.process.poll() is None
    member.signal()
    assert member.wait() == 143
    assert gone_within(pid, 1.0), f"daemon {pid} outlived a member ended at once"


# ------------------------------------------------------------------ a runtime killed outright


def test_a_daemon_of_a_member_killed_with_sigkill_ends_with_its_formation(
        tmp_path: Path, murmur_home: Path) -> None:
    """SIGKILL leaves the runtime no time to end anything: its agent process dies with
    it (parent-death signal) and its daemon is re-parented to the launcher, a child
    subreaper too, which ends it once every member has stopped."""
    project = tmp_path / "project"
    project.mkdir()
    boss = write_capsule(tmp_path, "boss", """
        async def run(task):
            return await (await task.call_member("spawner", task.text))
        """, allow_localhost=True)
    spawner = write_capsule(tmp_path, "spawner", AGENT, accept_peers=True)
    for source in (boss, spawner):
        install_capsule(project, source)
    write_roster(project, [("boss", True), ("spawner", False)], {"boss": ["spawner"]})
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    launcher = start_launcher(project, "--json", env=env)
    try:
        line = read_formation_line(launcher, timeout=90)
        sent = subprocess.run([sys.executable, "-m", "launcher.cli", "send",
                               line["formation_id"], "keep", "--json"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=90, check=False)
        assert sent.returncode == 0, sent.stderr
        pid = int(json.loads(sent.stdout)["artifacts"][0]["parts"][0]["text"])
        runtime = int(formation_members(line["formation_id"], env)["spawner"]["pid"])
        os.kill(runtime, signal.SIGKILL)
        wait_gone([runtime], 10)
        time.sleep(0.5)
        assert alive(pid)  # nothing of the runtime was left to end it
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.communicate(timeout=60)
    assert gone_within(pid, 1.0), f"daemon {pid} outlived its formation"


# ------------------------------------------------------------------ the agent side's cgroup


def can_make_cgroup() -> str | None:
    """Why this process cannot make an agent-side cgroup here, or None."""
    from launcher.sandbox.agent_cgroup import AgentCgroup, cgroup_root

    root = cgroup_root()
    if root is None:
        return "no cgroup v2 is mounted"
    probe = AgentCgroup.make("probe-of-the-tests", root)
    if probe is None:
        return f"this user may not make a cgroup under {root} (or it has no cgroup.kill)"
    probe.remove()
    return None


def cgroup_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    return ""


def test_where_a_cgroup_can_be_made_the_agent_side_runs_in_one_that_ends_whole(
        project: Project) -> None:
    why = can_make_cgroup()
    if why is not None:
        pytest.skip(f"{why}: the subreaper alone ends the agent side (tested above)")
    project.capsule("spawner", agent=AGENT)
    member = project.run("spawner")
    answer = member.rpc("SendMessage", {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "keep"}]}})
    pid = int(answer["result"]["task"]["artifacts"][0]["parts"][0]["text"])
    session = member.ready["session_id"]
    started = next(r for r in member.trace() if r["event"] == "agent_process_started")
    assert started["cgroup"] and started["cgroup"].endswith(f"/murmur-{session}")
    assert cgroup_of(pid).endswith(f"/murmur-{session}")  # the daemon too
    assert cgroup_of(member.pid) != cgroup_of(pid)  # the runtime is not in it
    member.signal()
    assert member.wait() == 0
    assert gone_within(pid, 1.0)
    assert not Path(started["cgroup"]).exists()  # removed with the member


def test_a_cgroup_is_removed_when_its_member_ends_at_once(project: Project) -> None:
    why = can_make_cgroup()
    if why is not None:
        pytest.skip(f"{why}: the subreaper alone ends the agent side (tested above)")
    project.capsule("spawner", agent=AGENT)
    member = project.run("spawner")
    member.rpc("SendMessage", {"message": {
        "messageId": "m-2", "role": "ROLE_USER", "parts": [{"text": "stubborn"}]},
        "configuration": {"returnImmediately": True}})
    started = next(r for r in member.trace() if r["event"] == "agent_process_started")
    member.signal()
    time.sleep(0.5)
    member.signal()
    assert member.wait() == 143
    assert not Path(started["cgroup"]).exists()
