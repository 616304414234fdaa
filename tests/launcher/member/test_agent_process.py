"""launcher.member.agent_process and launcher.member.agent: the agent process, through
real processes (a fresh interpreter each; the warm fork is ``main``'s, tested by the
integration tests): start and its failures, tasks and their calls, cancelling, a dying
agent process, and what the process inherits."""

from __future__ import annotations

import asyncio
import json
import os
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.door.task_record import TaskRecord
from gateway.door.tasks import GateConfig, TaskStore
from gateway.protocol import TaskState
from gateway.trace.bus import TraceBus
from launcher.member.agent.protocol import VERSION, encode
from launcher.member.agent_process import AgentProcess, AgentStartFailed, spawn_agent
from tests.support.door import OPERATOR, user_message


def start_message(tmp_path: Path, source: str, *, command: list[str] | None = None,
                  process_env: dict[str, str] | None = None) -> dict[str, Any]:
    capsule = tmp_path / "capsule"
    capsule.mkdir(exist_ok=True)
    module = f"agent_{uuid.uuid4().hex[:10]}"
    (capsule / f"{module}.py").write_text(textwrap.dedent(source))
    agent: dict[str, Any] = {"command": command} if command else {"python": f"{module}:run"}
    return {"agent": agent, "capsule_dir": str(capsule), "workdir": str(tmp_path),
            "environment": {"env": {"ALLOWED": "yes"}, "max_turns": 3,
                            "home": str(tmp_path), "tmp": str(tmp_path),
                            "workdir": str(tmp_path)},
            "process_env": process_env or {"PATH": os.environ.get("PATH", "")},
            "proxy_url": None, "peers": [], "confine": None}


async def started(message: dict[str, Any], trace: TraceBus | None = None,
                  python: bool = True) -> AgentProcess:
    process = AgentProcess(message, python=python, max_turns=3, calls_factory=None,
                           trace=trace or TraceBus())
    await process.start()
    return process


async def run_one(process: AgentProcess, text: str) -> TaskRecord:
    store = TaskStore(process.agent_fn(), GateConfig(concurrency=4), TraceBus())
    record = store.send(user_message(text), OPERATOR)
    await asyncio.wait_for(store.settled(record, interrupted=False), 30)
    return record


def answer(record: TaskRecord) -> str:
    return str(record.artifacts[-1]["parts"][0]["text"])


AGENT = """
import asyncio, os, sys

async def run(task):
    if task.text == "fail":
        raise ValueError("no luck")
    if task.text == "die":
        os._exit(9)
    if task.text == "sleep":
        await asyncio.sleep(60)
    if task.text == "env":
        return repr(sorted(os.environ))
    if task.text == "artifacts":
        await task.status("working on it")
        first = await task.artifact("one, ", name="story")
        await task.artifact(b"two", append=True, artifact_id=first, last_chunk=True)
        return None
    if task.text == "pid":
        return str(os.getpid())
    print("agent says hello", file=sys.stderr)
    return f"{task.origin}/{task.trust}: {task.text} ({task.env['ALLOWED']})"
"""


async def test_a_task_runs_in_the_agent_process_and_returns_its_answer(
        tmp_path: Path) -> None:
    process = await started(start_message(tmp_path, AGENT))
    try:
        record = await run_one(process, "hello")
        assert record.state == TaskState.COMPLETED
        assert answer(record) == "operator/trusted: hello (yes)"
        pid = answer(await run_one(process, "pid"))
        assert int(pid) == process.pid != os.getpid()
    finally:
        await process.close()


async def test_status_and_artifacts_travel_over_the_socketpair(tmp_path: Path) -> None:
    process = await started(start_message(tmp_path, AGENT))
    try:
        record = await run_one(process, "artifacts")
        assert record.state == TaskState.COMPLETED
        (story,) = record.artifacts
        assert story["name"] == "story"
        assert [part.get("text", part.get("raw")) for part in story["parts"]] == [
            "one, ", "dHdv"]  # b"two", base64
    finally:
        await process.close()


async def test_agent_code_that_raises_fails_its_task_with_its_message(
        tmp_path: Path) -> None:
    process = await started(start_message(tmp_path, AGENT))
    try:
        record = await run_one(process, "fail")
        assert record.state == TaskState.FAILED
        assert record.status["message"]["parts"][0]["text"] == "ValueError: no luck"
    finally:
        await process.close()


async def test_the_agent_process_environment_is_only_what_start_gave(
        tmp_path: Path) -> None:
    message = start_message(tmp_path, AGENT, process_env={"PATH": "/usr/bin", "ONLY": "1"})
    process = await started(message)
    try:
        names = answer(await run_one(process, "env"))
        assert names == repr(["LC_CTYPE", "ONLY", "PATH"]) or names == repr(["ONLY", "PATH"])
    finally:
        await process.close()


async def test_cancelling_a_task_cancels_its_coroutine_in_the_agent_process(
        tmp_path: Path) -> None:
    process = await started(start_message(tmp_path, AGENT))
    store = TaskStore(process.agent_fn(), GateConfig(), TraceBus())
    try:
        record = store.send(user_message("sleep"), OPERATOR)
        await asyncio.sleep(0.5)
        store.cancel(record, "enough")
        await asyncio.wait_for(store.settled(record, interrupted=False), 15)
        assert record.state == TaskState.CANCELED
        assert answer(await run_one(process, "after")).endswith("after (yes)")
    finally:
        await process.close()


async def test_an_agent_process_that_dies_fails_its_task_and_the_next_task_gets_a_new_one(
        tmp_path: Path) -> None:
    trace = TraceBus()
    ended: list[dict[str, Any]] = []
    trace.add_sink(lambda record: ended.append(dict(record))
                   if record["event"] == "agent_process_ended" else None)
    process = await started(start_message(tmp_path, AGENT), trace)
    first = process.pid
    try:
        record = await run_one(process, "die")
        assert record.state == TaskState.FAILED
        text = record.status["message"]["parts"][0]["text"]
        assert text.startswith("the agent process ended while the task ran (exit status 9)")
        assert "a new one is started for the next task" in text
        assert [(e["status"], e["tasks_failed"]) for e in ended] == [("exit status 9", 1)]
        again = await run_one(process, "pid")
        assert again.state == TaskState.COMPLETED
        assert int(answer(again)) == process.pid != first
    finally:
        await process.close()


async def test_a_capsule_that_cannot_load_is_a_start_failure_naming_it(
        tmp_path: Path) -> None:
    message = start_message(tmp_path, AGENT)
    message["agent"] = {"python": "missing_module:run"}
    process = AgentProcess(message, python=True, max_turns=3, calls_factory=None,
                           trace=TraceBus())
    with pytest.raises(AgentStartFailed, match="the capsule has no missing_module.py"):
        await process.start()
    assert process.pid is None


async def test_a_command_agent_runs_under_the_agent_process(tmp_path: Path) -> None:
    message = start_message(tmp_path, AGENT, command=["sh", "-c", "echo got: $(cat)"])
    process = await started(message, python=False)
    try:
        record = await run_one(process, "hi")
        assert answer(record) == "got: hi"
    finally:
        await process.close()


async def test_closing_ends_the_agent_process(tmp_path: Path) -> None:
    process = await started(start_message(tmp_path, AGENT))
    pid = process.pid
    assert pid is not None
    await process.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_runtime_of_another_protocol_version_is_refused_by_name() -> None:
    child = spawn_agent()
    try:
        child.sock.sendall(encode({"op": "start", "v": VERSION + 1}))
        answer = json.loads(child.sock.makefile("rb").readline())
        assert answer["op"] == "start_failed"
        assert f"protocol {VERSION + 1}" in answer["error"]
        assert f"this process {VERSION}" in answer["error"]
    finally:
        child.sock.close()
        assert child.popen is not None
        assert child.popen.wait(timeout=10) == 1
