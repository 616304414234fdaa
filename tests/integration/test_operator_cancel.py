"""``mur cancel``: the operator cancels a running task at a session's door (or a
formation's entry door) with the session's operator token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import member as support
from tests.support.member import Project, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)



def test_mur_cancel_cancels_a_running_task_once(project: Project) -> None:
    project.capsule("echo")
    member = project.run("echo")
    session = member.ready["session_id"]
    started = member.rpc("SendMessage", {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "sleep 30"}]},
        "configuration": {"returnImmediately": True}})
    task_id = started["result"]["task"]["id"]
    wait_for(lambda: task_id in support.running_task_ids(member))
    first = project.mur("cancel", session, task_id, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["status"]["state"] == "TASK_STATE_CANCELED"
    again = project.mur("cancel", session, task_id)
    assert again.returncode == 1 and "already ended" in again.stderr
    unknown = project.mur("cancel", member.door, "no-such-task")
    assert unknown.returncode == 1 and "has no task no-such-task" in unknown.stderr
    assert member.token not in first.stdout + first.stderr + again.stderr
    member.signal()
    assert member.wait() == 0


def test_mur_cancel_of_nothing_running_says_so(project: Project) -> None:
    done = project.mur("cancel", "frm_0190c0de00007000800000000000f00d", "t1")
    assert done.returncode == 1 and "is not running" in done.stderr
