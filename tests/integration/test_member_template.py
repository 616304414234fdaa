"""The member template (launcher/template.py, launcher/formation/template.py): a real
``mur run --roster`` forks its members from one warm interpreter that holds no token,
reports their exits, and is gone with the formation."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.formation import (
    CODER_AGENT,
    PLANNER_AGENT,
    REVIEWER_AGENT,
    kill_group_quietly,
    launcher_env,
    read_formation_line,
    simple_project,
    start_launcher,
    wait_gone,
)
from tests.support.member import wait_for
from tests.support.memory import memory_holds

pytestmark = pytest.mark.integration


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, object]]]:
    project = simple_project(
        tmp_path, ["planner", "coder", "reviewer"], entry="planner",
        reachability={"planner": ["coder", "reviewer"]},
        agents={"planner": PLANNER_AGENT, "coder": CODER_AGENT, "reviewer": REVIEWER_AGENT})
    process = start_launcher(project, "--json")
    try:
        yield process, read_formation_line(process, timeout=90)
    finally:
        kill_group_quietly(process)
        process.wait(timeout=30)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def token_in(pid: int) -> bytes | None:
    """A formation token from the memory of ``pid`` (read as root), or None."""
    pattern = re.compile(rb"mft1\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}")
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as memory:
        for entry in maps:
            span, perms = entry.split()[:2]
            if "rw" not in perms:
                continue
            low, high = (int(value, 16) for value in span.split("-"))
            try:
                memory.seek(low)
                found = pattern.search(memory.read(high - low))
            except (OSError, OverflowError, ValueError):
                continue
            if found:
                return found.group(0)
    return None


def test_every_member_is_forked_by_one_template_that_holds_no_token(
        launcher: tuple[subprocess.Popen[bytes], dict[str, object]]) -> None:
    process, line = launcher
    pids = [int(member["pid"]) for member in line["members"]]  # type: ignore[attr-defined]
    (template,) = {parent_of(pid) for pid in pids}
    assert template != process.pid and parent_of(template) == process.pid
    assert b"launcher.template" in Path(f"/proc/{template}/cmdline").read_bytes()
    if os.geteuid() == 0:  # reading another process's memory needs root
        planner = next(int(m["pid"]) for m in line["members"]  # type: ignore[attr-defined]
                       if m["name"] == "planner")
        token = token_in(planner)  # the planner holds its tokens for coder and reviewer
        assert token is not None
        assert not memory_holds(template, token)
    # The launcher ends every member, then the template.
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    wait_gone([*pids, template], 10)


def test_a_member_that_dies_is_reported_through_the_template(
        launcher: tuple[subprocess.Popen[bytes], dict[str, object]]) -> None:
    process, line = launcher
    coder = next(int(m["pid"]) for m in line["members"]  # type: ignore[attr-defined]
                 if m["name"] == "coder")
    os.kill(coder, signal.SIGKILL)
    wait_gone([coder], 10)
    time.sleep(1.0)  # the launcher hears of it from the template
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert b"member `coder` ended with signal 9 while the formation runs" in err, err


SECRET = "a-declared-credential-" + "for-the-template-memory-scan"


@pytest.mark.skipif(os.geteuid() != 0, reason="reading another process's memory needs root")
def test_an_agent_process_of_a_forked_member_holds_no_variable_of_the_launchers(
        tmp_path: Path) -> None:
    """A credential in the launcher's environment (a declared bearer's variable) is in
    every member runtime, as with exec'd members, and in none of their agent processes:
    the template sends members only how their environment differs from its own."""
    project = simple_project(
        tmp_path, ["planner", "coder", "reviewer"], entry="planner",
        reachability={"planner": ["coder", "reviewer"]},
        agents={"planner": PLANNER_AGENT, "coder": CODER_AGENT, "reviewer": REVIEWER_AGENT})
    process = start_launcher(project, "--json", env=launcher_env(
        MURMUR_HOME=os.environ["MURMUR_HOME"], SOME_DOOR_TOKEN=SECRET))
    try:
        line = read_formation_line(process, timeout=90)
        for member in line["members"]:  # type: ignore[attr-defined]
            runtime = int(member["pid"])
            (agent,) = children(runtime)
            assert memory_holds(runtime, SECRET.encode()), member["name"]
            assert not memory_holds(agent, SECRET.encode()), member["name"]
    finally:
        kill_group_quietly(process)
        process.wait(timeout=30)


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def test_ps_names_each_member_and_the_launcher_as_what_they_are(
        launcher: tuple[subprocess.Popen[bytes], dict[str, object]]) -> None:
    """A member forked from the template is not `python -m launcher.template` in ps or
    top: its command line is the mur run it stands for, and no token is in it."""
    process, line = launcher
    formation = line["formation_id"]
    for member in line["members"]:  # type: ignore[attr-defined]
        pid, name = int(member["pid"]), member["name"]
        shown = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert shown.startswith(f"mur run --capsule local/{name} --capsule-version 1.0.0"), shown
        assert f"--member {name} --formation {formation}" in shown, shown
        assert "mft1." not in shown
        assert Path(f"/proc/{pid}/comm").read_text().strip() == f"mur:{name}"[:15]
    shown = Path(f"/proc/{process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert shown.startswith("mur run --roster ") and f"--formation {formation}" in shown, shown
    assert Path(f"/proc/{process.pid}/comm").read_text().strip() == "mur:launcher"


# -- begun before the launch ------------------------------------------------------------

def templates_of(home: str) -> list[int]:
    """The member templates running with ``MURMUR_HOME=home`` in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"launcher.template" not in (entry / "cmdline").read_bytes():
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"MURMUR_HOME={home}".encode() in environ:
            found.append(int(entry.name))
    return found


def test_a_launch_takes_the_template_begun_with_its_own_environment() -> None:
    from launcher.formation.early_template import EarlyTemplate, launch_environment
    from launcher.formation.template import MemberTemplate

    environ = launch_environment(launcher_env(), isolation="off", json_mode=True)
    with EarlyTemplate(environ) as early:
        template = early.take(dict(environ))
        assert isinstance(template, MemberTemplate)
    assert not template.closed            # taken: the launch closes it, not the with
    template.wait_ready()
    template.close()


def test_a_template_begun_with_another_environment_is_ended_not_used() -> None:
    from launcher.formation.early_template import EarlyTemplate, launch_environment

    environ = launch_environment(launcher_env(), isolation="off", json_mode=True)
    home = environ["MURMUR_HOME"]
    with EarlyTemplate(environ) as early:
        # Popen returns when the exec is past its point of no return, a moment before the
        # kernel writes the new command line: until then /proc shows it empty.
        wait_for(lambda: templates_of(home), timeout=10)
        assert early.take({**environ, "MURMUR_ISOLATION": "auto"}) is None
    assert templates_of(home) == []


def test_a_refused_launch_ends_the_template_it_began(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "roster.yaml").write_text("roster_version: 1\nmembers: [\n")   # no YAML
    env = launcher_env()
    process = start_launcher(project, "--task", "hi", env=env)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1, err.decode()
    assert b"E-ROS" in err
    assert templates_of(env["MURMUR_HOME"]) == []
