"""The agent process of a real ``mur run --capsule`` (docs/isolation.md): forked before
any credential was read, its inherited environment overwritten in its memory, confined
as ``--isolation`` says, and restarted after it dies."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.sandbox.landlock import host_support
from tests.support.member import Project, codes, project_fixture, wait_for
from tests.support.memory import memory_holds

pytestmark = pytest.mark.integration

SECRET = "declared-bearer-" + "s3cr3t-value-for-the-memory-scan"

AGENT = '''
import os

async def run(task):
    if task.text == "pid":
        return str(os.getpid())
    if task.text == "environ":
        return " ".join(sorted(os.environ))
    if task.text == "home":
        try:
            os.listdir(os.path.dirname(os.path.dirname(str(task.home))))
        except OSError as exc:
            return f"refused: {exc.strerror}"
        return "listed"
    return "ok"
'''

project = pytest.fixture(project_fixture)


@pytest.fixture
def declared(project: Project) -> Iterator[str]:
    yield project.capsule(
        "keeper", agent=AGENT,
        authentication="{bearer: [{name: ops, env: KEEPER_TOKEN, scopes: [SendMessage, GetTask]}]}")


@pytest.mark.skipif(os.geteuid() != 0, reason="reading another process's memory needs root")
def test_the_agent_process_holds_no_credential_of_the_runtime(
        project: Project, declared: str) -> None:
    member = project.run("keeper", env={"KEEPER_TOKEN": SECRET})
    answer = member.rpc("SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "pid"}]},
        "configuration": {"returnImmediately": False}})
    agent_pid = int(answer["result"]["task"]["artifacts"][0]["parts"][0]["text"])
    assert agent_pid != member.pid
    assert Path(f"/proc/{agent_pid}/stat").read_text().split()[3] == str(member.pid)
    # The runtime holds the declared credential (its door checks it); its agent process,
    # forked from it, does not: not in its environment, not anywhere in its memory.
    assert memory_holds(member.pid, SECRET.encode())
    assert SECRET.encode() not in Path(f"/proc/{agent_pid}/environ").read_bytes()
    assert not memory_holds(agent_pid, SECRET.encode())
    assert not memory_holds(agent_pid, member.token.encode())
    started = [r for r in member.trace() if r["event"] == "agent_process_started"]
    assert [r["pid"] for r in started] == [agent_pid]


def ask(project: Project, member_name: str, text: str, env: dict[str, str] | None = None
        ) -> str:
    done = project.run(member_name, "--task", text, env=env)
    assert done.wait() == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(not host_support().files, reason=f"{host_support().describe()}")
def test_with_isolation_on_the_agent_cannot_list_murmur_home_and_off_it_can(
        project: Project) -> None:
    project.capsule("lister", agent=AGENT)
    assert ask(project, "lister", "home").startswith("refused: Permission denied")
    assert ask(project, "lister", "home", env={"MURMUR_ISOLATION": "off"}) == "listed"
    done = project.run("lister", "--task", "home", "--isolation", "off",
                       env={"MURMUR_ISOLATION": "auto"})
    assert done.wait() == 0 and done.stdout.strip() == "listed"  # the flag wins


def test_an_isolation_mode_that_is_not_one_is_a_usage_error(project: Project) -> None:
    project.capsule("lister", agent=AGENT)
    process = project.start("lister", "--task", "x", env={"MURMUR_ISOLATION": "sometimes"})
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "MURMUR_ISOLATION must be one of auto, required, off (not 'sometimes')" in \
        err.decode()


@pytest.mark.skipif(host_support().abi < 6, reason=f"{host_support().describe()}")
def test_isolation_required_runs_where_the_host_offers_it(project: Project) -> None:
    project.capsule("lister", agent=AGENT)
    done = project.run("lister", "--task", "environ", "--isolation", "required")
    assert done.wait() == 0, done.stderr
    names = done.stdout.split()
    assert "HTTP_PROXY" in names and "HOME" in names and "KEEPER_TOKEN" not in names
    assert not codes(done.stderr)


def test_a_killed_agent_process_fails_its_task_and_the_member_goes_on(
        project: Project) -> None:
    project.capsule("sleeper", agent=AGENT.replace(
        '    return "ok"', '    import asyncio\n    await asyncio.sleep(60)\n    return "ok"'))
    member = project.run("sleeper")
    pid_answer = member.rpc("SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "pid"}]}})
    agent_pid = int(pid_answer["result"]["task"]["artifacts"][0]["parts"][0]["text"])
    slow = member.rpc("SendMessage", {"message": {
        "messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "sleep"}]},
        "configuration": {"returnImmediately": True}})
    task_id = slow["result"]["task"]["id"]
    os.kill(agent_pid, signal.SIGKILL)

    def final() -> dict[str, object] | None:
        task = member.rpc("GetTask", {"id": task_id})["result"]
        return task if task["status"]["state"] == "TASK_STATE_FAILED" else None

    task = wait_for(final, timeout=15)
    text = task["status"]["message"]["parts"][0]["text"]
    assert re.match(r"the agent process ended while the task ran \(killed by SIGKILL\)", text)
    again = member.rpc("SendMessage", {"message": {
        "messageId": "m3", "role": "ROLE_USER", "parts": [{"text": "pid"}]}})
    assert int(again["result"]["task"]["artifacts"][0]["parts"][0]["text"]) != agent_pid
    assert "agent_process_ended" in member.events()


PLANTER = '''
import os

PLANTED = """
import pathlib
pathlib.Path({marker!r}).write_text("ran unconfined")
raise SystemExit("planted")
"""

async def run(task):
    if task.text.startswith("plant "):
        for name in ("socket.py", "ctypes.py", "traceback.py", "launcher.py"):
            (task.workdir / name).write_text(PLANTED.format(marker=task.text[6:]))
        os._exit(3)
    return f"clean in {os.getpid()}"
'''


def test_a_module_planted_in_the_work_folder_never_runs_in_a_restarted_agent_process(
        project: Project, tmp_path: Path) -> None:
    marker = tmp_path / "ESCAPED"
    project.capsule("planter", agent=PLANTER)
    member = project.run("planter", cwd=project.path)  # the work folder is the cwd
    planted = member.rpc("SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": f"plant {marker}"}]}})
    assert planted["result"]["task"]["status"]["state"] == "TASK_STATE_FAILED"
    assert (project.path / "socket.py").exists()
    again = member.rpc("SendMessage", {"message": {
        "messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "hello"}]}})
    assert again["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", again
    assert not marker.exists()


SHADOWER = '''
import os, urllib.request

PLANTED = """
import pathlib
pathlib.Path({marker!r}).write_text("ran in the runtime")
raise ImportError("planted")
"""

async def run(task):
    marker = task.text
    for name in ("httpx.py", "aiohttp.py", "h11.py", "anyio.py"):
        (task.workdir / name).write_text(PLANTED.format(marker=marker))
    try:  # reach the forward proxy: the runtime builds it, importing what it needs
        urllib.request.urlopen("http://nowhere.invalid/", timeout=5).read()
    except Exception as exc:
        return f"asked: {type(exc).__name__}"
    return "asked"
'''


def test_a_module_planted_in_the_working_directory_never_shadows_one_the_runtime_imports(
        project: Project, tmp_path: Path) -> None:
    marker = tmp_path / "SHADOWED"
    project.capsule("shadower", agent=SHADOWER)
    member = project.run("shadower", cwd=project.path)
    answer = member.rpc("SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": str(marker)}]}})
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    assert (project.path / "httpx.py").exists()
    assert not marker.exists()
