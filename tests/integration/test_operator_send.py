"""``mur send`` as an operator uses it: it waits out a busy member with the door's
``retryAfterMs`` (bounded by ``--timeout``), answers a task that asks for input with
``--reply`` (or cancels it when nothing can answer), continues a task with
``--task-id``; and a ``--task`` run whose task asks for input says so on stderr."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import member as support
from tests.support.member import Project, wait_for

pytestmark = pytest.mark.integration

ASKING_AGENT = """
import asyncio

async def run(task):
    if task.text.startswith("sleep "):
        await asyncio.sleep(float(task.text.split()[1]))
        return "slept"
    first = await task.input_required("which colour?")
    second = await task.input_required("and which size?")
    return f"a {second} {first} one"
"""


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)



def test_replies_answer_each_question_in_turn(project: Project) -> None:
    project.capsule("asker", agent=ASKING_AGENT)
    member = project.run("asker")
    session = str(member.ready["session_id"])
    done = project.mur("send", session, "a shirt", "--reply", "red", "--reply", "large")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a large red one\n"
    assert "which colour?" in done.stderr and "input-required" in done.stderr
    member.signal()
    assert member.wait() == 0


def test_a_question_nobody_can_answer_cancels_the_task(project: Project) -> None:
    project.capsule("asker", agent=ASKING_AGENT)
    member = project.run("asker")
    done = project.mur("send", str(member.ready["session_id"]), "a shirt")
    assert done.returncode == 1
    assert "asks for input (which colour?)" in done.stderr and "canceled" in done.stderr
    listed = member.rpc("ListTasks")["result"]["tasks"]
    assert [task["status"]["state"] for task in listed] == ["TASK_STATE_CANCELED"]
    member.signal()
    assert member.wait() == 0


def test_task_id_continues_a_task_that_asks_for_input(project: Project) -> None:
    project.capsule("asker", agent=ASKING_AGENT)
    member = project.run("asker")
    started = member.rpc("SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "a hat"}]}})
    task = started["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    done = project.mur("send", str(member.ready["session_id"]), "blue",
               "--task-id", task["id"], "--reply", "small")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a small blue one\n"
    member.signal()
    assert member.wait() == 0


def test_a_busy_member_is_offered_the_task_again_until_it_takes_it(
        project: Project, tmp_path: Path) -> None:
    project.capsule("asker", agent=ASKING_AGENT)  # concurrency 1, queue_depth 0
    member = project.run("asker")
    session = str(member.ready["session_id"])
    # A task that asks for input holds the member's one place until it is cancelled,
    # however long each `mur send` takes to start (a task that slept could end before
    # the second send first tried, and then it was never told the member was busy).
    held = member.rpc("SendMessage", {"message": {"messageId": "m1", "role": "ROLE_USER",
                                                  "parts": [{"text": "a hat"}]}})
    assert held["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    refused = project.mur("send", session, "sleep 0", "--timeout", "1s")
    assert refused.returncode == 1 and "stayed busy" in refused.stderr
    told = tmp_path / "waited.stderr"
    with told.open("w") as sink:
        waited = subprocess.Popen(
            [sys.executable, "-m", "launcher.cli", "send", session, "sleep 0",
             "--timeout", "60s"], env=support.member_env(project.home),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=sink, text=True)
    try:
        wait_for(lambda: "busy: offering the task again" in told.read_text(), timeout=30)
        member.rpc("CancelTask", {"id": held["result"]["task"]["id"]})
        out, _ = waited.communicate(timeout=60)
    finally:
        if waited.poll() is None:
            waited.kill()
            waited.wait()
    assert waited.returncode == 0, told.read_text()
    assert out == "slept\n"
    member.signal()
    assert member.wait() == 0


def test_a_task_run_whose_task_asks_for_input_says_how_to_answer(project: Project) -> None:
    project.capsule("asker", agent=ASKING_AGENT)
    process = project.start("asker", "--task", "a coat")
    member = support.read_ready(process)
    project.members.append(member)
    session = str(member.ready["session_id"])
    task_id = wait_for(lambda: support.running_task_ids(member) or [
        t["id"] for t in member.rpc("ListTasks")["result"]["tasks"]])[0]
    answered = project.mur("send", session, "green", "--task-id", task_id,
                   "--reply", "tiny")
    assert answered.returncode == 0, answered.stderr
    assert member.wait() == 0
    assert member.stdout == "a tiny green one\n"
    assert "the task asks for input: which colour?" in member.stderr
    assert f"mur send {session} --task-id {task_id}" in member.stderr


def test_timeout_that_is_not_a_duration_is_a_usage_error(project: Project) -> None:
    done = project.mur("send", "frm_0190c0de00007000800000000000f00d", "hi",
               "--timeout", "soon")
    assert done.returncode == 2 and "--timeout" in done.stderr
