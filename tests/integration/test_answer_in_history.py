"""A gateway member whose upstream replies as agent-framework-a2a does by default (a
WORKING status message with the reply, then COMPLETED with no message and no artifact:
``tests/agents/history_agent.py``) is heard (docs/gateway.md, "The answer of a task"):
by a caller member through ``call_member`` (``await handle`` and ``task.answers()``) in a
``mur run --roster --task`` formation, by ``mur send``, and by ``mur run --capsule
--task``. And a gateway member whose upstream card takes only ``application/json`` (as
fasta2a's says) refuses text with ``-32005`` naming ``agent.input_modes``, the key that
fixes it.

Order: the formation, then the standalone gateway member (``mur send``, ``--task``),
then the refused media type.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import member as support
from tests.support.formation import (
    install_capsule,
    kill_group_quietly,
    start_launcher,
    write_capsule,
    write_roster,
)
from tests.support.gateway_capsules import history_capsule
from tests.support.member import Project

pytestmark = pytest.mark.integration

CALLER_AGENT = """
async def run(task):
    handle = await task.call_member("historybot", task.text)
    return "caller got: " + await handle + "\\n" + await task.answers()
"""

TASK_TIMEOUT_S = 90.0


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def test_a_caller_hears_the_reply_a_gateway_upstream_left_in_its_history(
        tmp_path: Path, murmur_home: Path) -> None:
    formation = tmp_path / "formation"
    formation.mkdir()
    caller = write_capsule(tmp_path, "caller", CALLER_AGENT, allow_localhost=True,
                           lifecycle="{concurrency: 1, queue_depth: 0}")
    for source in (caller, history_capsule(tmp_path)):
        install_capsule(formation, source)
    write_roster(formation, [("caller", True), ("historybot", False)],
                 {"caller": ["historybot"]})
    process = start_launcher(formation, "--json", "--task", "hello")
    try:
        out, err = process.communicate(timeout=TASK_TIMEOUT_S)
    finally:
        kill_group_quietly(process)
    assert process.returncode == 0, err.decode()
    line, *answer = out.decode().splitlines()
    assert json.loads(line)["event"] == "formation"
    assert answer == ["caller got: historybot replied: hello",
                      "```member:historybot", "historybot replied: hello", "```"]


def start_history_member(project: Project, name: str, *args: str,
                         input_modes: tuple[str, ...] = ()) -> support.Member:
    source = history_capsule(project.path.parent, name, input_modes)
    support.install_capsule(project.path, source)
    return project.run(name, *args)


def test_mur_send_prints_the_reply_a_gateway_upstream_left_in_its_history(
        project: Project) -> None:
    member = start_history_member(project, "historybot")
    sent = project.mur("send", str(member.ready["session_id"]), "hello")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == "historybot replied: hello\n"
    member.signal()
    assert member.wait() == 0, member.stderr


def test_mur_run_task_of_a_gateway_member_prints_the_reply_left_in_its_history(
        project: Project) -> None:
    member = start_history_member(project, "historybot", "--task", "hello")
    assert member.wait(TASK_TIMEOUT_S) == 0, member.stderr
    assert member.stdout == "historybot replied: hello\n"
    assert (member.records / "out" / "result.txt").read_text() == "historybot replied: hello\n"


def test_a_refused_media_type_names_agent_input_modes(project: Project) -> None:
    member = start_history_member(project, "jsonbot", input_modes=("application/json",))
    refused = member.rpc("SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}})
    member.signal()
    assert member.wait() == 0, member.stderr
    error = refused["error"]
    assert error["code"] == -32005, refused
    assert "this agent takes application/json" in error["message"]
    assert "agent.input_modes" in error["message"], error["message"]
