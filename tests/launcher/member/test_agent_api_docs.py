"""Every example of docs/agent-api.md runs as written: each ``# example:`` block is
loaded as an agent behind a door and sent a task (examples that need a formation are
checked without running: they compile and define ``async def run``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.door.app import DoorSettings, build_door
from gateway.door.tasks import GateConfig
from launcher.member.capsule import AgentEnvironment, python_agent
from tests.support.door import card_info, client_for, rpc, send_params, shimmed

PAGE = Path(__file__).resolve().parents[3] / "docs" / "agent-api.md"
BLOCK = re.compile(r"```python\n# example: (?P<name>[a-z-]+)(?P<rest>[^\n]*)\n(?P<code>.*?)```",
                   re.S)
EXAMPLES = {match["name"]: (match["rest"], match["code"]) for match in BLOCK.finditer(
    PAGE.read_text(encoding="utf-8"))}
#: What each example answers to the task text "a shirt" (reply: its follow-up message).
EXPECTED: dict[str, dict[str, Any]] = {
    "hello": {"answer": "hello, a shirt"},
    "who": {"answer_starts": "operator/trusted asked "},
    "files": {"answer": "A SHIRT"},
    "context": {"answer_has": ["'message_id': True", "'context': True", "'home': True",
                               "'peers': []", "'turn': 1", "'replies': ''",
                               "'max_turns': 8"]},
    "status": {"answer": "done thinking"},
    "artifacts": {"artifacts": ["part one, ", "part two", '{"words": 4}']},
    "ask": {"reply": "large", "answer": "a large a shirt"},
    "reject": {"state": "TASK_STATE_REJECTED"},
    "reply": {"message": "noted: a shirt"},
}


def load(name: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(EXAMPLES[name][1], f"agent-api.md:{name}", "exec"), namespace)  # noqa: S102
    return namespace["run"]


def test_the_page_has_its_examples() -> None:
    assert set(EXPECTED) <= set(EXAMPLES)
    assert {"call", "fan-out", "turns", "http", "children"} <= set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(name for name, (rest, _) in EXAMPLES.items()
                                        if "needs" in rest))
def test_examples_that_need_a_formation_compile_and_define_async_run(name: str) -> None:
    tree = ast.parse(EXAMPLES[name][1])
    assert any(isinstance(node, ast.AsyncFunctionDef) and node.name == "run"
               for node in tree.body)


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_an_example_runs_as_written(name: str, tmp_path: Path) -> None:
    environment = AgentEnvironment(home=tmp_path, tmp=tmp_path, workdir=tmp_path)
    door = build_door(python_agent(load(name), environment),
                      DoorSettings(card=card_info(), gate=GateConfig(concurrency=2)))
    expected = EXPECTED[name]
    async with client_for(shimmed(door)) as client:
        body = await rpc(client, "SendMessage", send_params("a shirt"))
        result = body["result"]
        if "reply" in expected:
            task = result["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            body = await rpc(client, "SendMessage", send_params(
                expected["reply"], taskId=task["id"], contextId=task["contextId"]))
            result = body["result"]
    if "message" in expected:
        assert result["message"]["parts"][0]["text"] == expected["message"]
        return
    task = result["task"]
    assert task["status"]["state"] == expected.get("state", "TASK_STATE_COMPLETED"), task
    texts = [part.get("text") or str(part.get("data")).replace("'", '"')
             for artifact in task.get("artifacts", []) for part in artifact["parts"]]
    if "answer" in expected:
        assert texts == [expected["answer"]]
    if "answer_starts" in expected:
        assert texts[0].startswith(expected["answer_starts"]) and texts[0].endswith(": a shirt")
    for fragment in expected.get("answer_has", []):
        assert fragment in texts[0], texts
    if "artifacts" in expected:
        assert texts == expected["artifacts"]
