"""launcher.member.capsule: loading an agent, the TaskContext, turns, the command harness."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.door.task_record import TaskRecord
from gateway.door.tasks import AgentFn, GateConfig, TaskRun, TaskStore
from gateway.protocol import TaskState
from gateway.trace.bus import TraceBus
from launcher.member.capsule import (
    AgentEnvironment,
    CapsuleError,
    Part,
    TaskContext,
    command_agent,
    load_agent,
    load_python_agent,
    python_agent,
)
from tests.support.door import OPERATOR, member, user_message
from tests.support.member import install_capsule, member_env, start_member


def capsule(tmp_path: Path, source: str, *, files: dict[str, str] | None = None) -> tuple[
        Path, str]:
    """A capsule directory with one agent module of a fresh name; returns (dir, module)."""
    root = tmp_path / "capsule"
    root.mkdir(exist_ok=True)
    module = f"cap_{uuid.uuid4().hex[:12]}"
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    for name, text in (files or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root, module


async def run_one(agent: AgentFn, text: str = "hello", caller: Any = OPERATOR,
                  **message: Any) -> TaskRecord:
    store = TaskStore(agent, GateConfig(), TraceBus())
    record = store.send(user_message(text, **message), caller)
    await asyncio.wait_for(store.settled(record, interrupted=False), 20)
    return record


def result_text(record: TaskRecord) -> str:
    return str(record.artifacts[-1]["parts"][0]["text"])


# --- loading python agents ---------------------------------------------------------


async def test_a_python_agent_runs_and_its_return_is_the_result(tmp_path: Path) -> None:
    root, module = capsule(tmp_path, """
        async def run(task):
            return "hi " + task.text
    """)
    record = await run_one(python_agent(load_python_agent(root, f"{module}:run")), "you")
    assert record.state == TaskState.COMPLETED and result_text(record) == "hi you"


async def test_an_agent_imports_its_sibling_modules(tmp_path: Path) -> None:
    helper = f"helper_{uuid.uuid4().hex[:8]}"
    root, module = capsule(tmp_path, f"""
        import {helper}

        async def run(task):
            return {helper}.shout(task.text)
    """, files={f"{helper}.py": "def shout(text):\n    return text.upper()\n"})
    record = await run_one(python_agent(load_python_agent(root, f"{module}:run")), "loud")
    assert result_text(record) == "LOUD"


async def test_a_dotted_module_inside_a_package(tmp_path: Path) -> None:
    package = f"pkg_{uuid.uuid4().hex[:8]}"
    root, _ = capsule(tmp_path, "", files={
        f"{package}/__init__.py": "",
        f"{package}/agent.py": "from . import words\n\nasync def run(task):\n"
                               "    return words.GREETING\n",
        f"{package}/words.py": "GREETING = 'from the package'\n"})
    record = await run_one(python_agent(load_python_agent(root, f"{package}.agent:run")))
    assert result_text(record) == "from the package"


@pytest.mark.parametrize("entry, fragment", [
    ("no_colon", "module:callable"), ("bad-name:run", "module:callable"),
    ("{module}:", "module:callable"), ("missing_module_xyz:run", "has no missing_module_xyz.py"),
    ("{module}:absent", "has no 'absent'"), ("{module}:sync", "must be an async function"),
])
def test_a_bad_entry_names_the_fault(tmp_path: Path, entry: str, fragment: str) -> None:
    root, module = capsule(tmp_path, """
        def sync(task):
            return "no"
    """)
    with pytest.raises(CapsuleError) as caught:
        load_python_agent(root, entry.format(module=module))
    assert fragment in str(caught.value)
    assert "agent.python" in str(caught.value)


def test_an_import_error_is_reported_without_a_traceback(tmp_path: Path) -> None:
    root, module = capsule(tmp_path, "raise RuntimeError('no model key')\n")
    with pytest.raises(CapsuleError) as caught:
        load_python_agent(root, f"{module}:run")
    assert "RuntimeError: no model key" in str(caught.value)
    assert "Traceback" not in str(caught.value)
    assert module not in sys.modules


def test_a_module_named_like_an_imported_one_is_refused(tmp_path: Path) -> None:
    root, _ = capsule(tmp_path, "", files={"json.py": "async def run(task):\n    return 'x'\n"})
    with pytest.raises(CapsuleError, match="already imported from elsewhere"):
        load_python_agent(root, "json:run")


def test_an_agent_module_symlinked_out_of_the_capsule_is_not_loaded(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("async def run(task):\n    return 'escaped'\n")
    root = tmp_path / "capsule"
    root.mkdir()
    name = f"link_{uuid.uuid4().hex[:8]}"
    os.symlink(outside, root / f"{name}.py")
    with pytest.raises(CapsuleError, match=f"has no {name}.py"):
        load_python_agent(root, f"{name}:run")


def test_load_agent_wants_exactly_one_kind(tmp_path: Path) -> None:
    with pytest.raises(CapsuleError, match="exactly one"):
        load_agent(tmp_path, python="a:run", command=["true"])


def test_load_agent_without_a_kind_says_a_gateway_member_is_relayed(tmp_path: Path) -> None:
    # An `agent.a2a` manifest gives neither python nor command: its door relays instead.
    with pytest.raises(CapsuleError, match=r"`agent.a2a` member is served by the relay"):
        load_agent(tmp_path)


A2A_CAPSULE = """\
manifest_version: 1
name: relay
version: 1.0.0
agent:
  a2a:
    command: [python3, server.py, --port, "{port}"]
    headers: {X-Api-Key: "${AGENT_KEY}"}
network: {authentication: {}}
capabilities: {env: {allow: [AGENT_KEY]}}
"""


def test_a_gateway_member_whose_upstream_exits_at_once_fails_with_e_run_049(
        tmp_path: Path, murmur_home: Path) -> None:
    source, project = tmp_path / "relay", tmp_path / "project"
    source.mkdir()
    project.mkdir()
    (source / "murmur.yaml").write_text(A2A_CAPSULE)
    (source / "server.py").write_text("raise SystemExit('the upstream gives up')\n")
    install_capsule(project, source)  # admitted unchanged by pack and install
    process = start_member(project, "local/relay", "--json", env=member_env(
        murmur_home, AGENT_KEY="not-a-real-key"))
    try:
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 1
    refusal = next(json.loads(line) for line in err.decode().splitlines()
                   if line.startswith("{") and '"E-RUN-049"' in line)
    assert refusal["path"] == "agent.a2a"
    assert "exited before it served its card (exit status 1)" in refusal["message"]
    assert "the upstream gives up" in err.decode()  # its stderr is the member's


# --- the TaskContext ---------------------------------------------------------------


async def test_the_task_context_offers_the_task_and_its_session(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    deadline = datetime(2030, 1, 1, tzinfo=UTC)
    environment = AgentEnvironment(
        member="coder", formation_id="frm_1", deadline=deadline, workdir=tmp_path / "w",
        home=tmp_path / "h", tmp=tmp_path / "t", env={"OPENAI_API_KEY": "k"}, max_turns=3)

    async def look(task: TaskContext) -> str:
        seen.update(text=task.text, id=task.id, context_id=task.context_id,
                    message=task.message, message_id=task.message_id, origin=task.origin,
                    trust=task.trust, member=task.member, formation_id=task.formation_id,
                    deadline=task.deadline, workdir=task.workdir, home=task.home, tmp=task.tmp,
                    turn=task.turn, replies=task.replies, peers=task.peers, env=task.env,
                    can_call=hasattr(task, "call_member"), has_http=hasattr(task, "http"))
        with pytest.raises(TypeError):
            task.env["X"] = "y"  # type: ignore[index]
        with pytest.raises(AttributeError, match="may call no other member"):
            task.call_member  # noqa: B018
        return "ok"

    record = await run_one(python_agent(look, environment), "the text",
                           member("planner", "trusted"), contextId="ctx")
    assert record.state == TaskState.COMPLETED
    assert seen["text"] == "the text" and seen["id"] == record.id
    assert seen["context_id"] == "ctx" and seen["message"]["parts"] == [{"text": "the text"}]
    assert seen["message_id"] == record.first_message["messageId"]
    assert (seen["origin"], seen["trust"]) == ("peer", "trusted")
    assert (seen["member"], seen["formation_id"], seen["deadline"]) == ("coder", "frm_1",
                                                                        deadline)
    assert (seen["workdir"], seen["home"], seen["tmp"]) == (tmp_path / "w", tmp_path / "h",
                                                            tmp_path / "t")
    assert (seen["turn"], seen["replies"], seen["peers"]) == (1, "", ())
    assert dict(seen["env"]) == {"OPENAI_API_KEY": "k"}
    assert seen["can_call"] is False and seen["has_http"] is False


async def test_artifacts_of_every_part_kind() -> None:
    async def produce(task: TaskContext) -> None:
        await task.artifact("plain text", name="text")
        await task.artifact(b"\x00\x01", name="bytes")
        await task.artifact(Part(url="https://example.com/a.png", media_type="image/png",
                                 filename="a.png"), name="url")
        await task.artifact({"data": {"rows": [1, 2]}, "mediaType": "application/json"},
                            name="data")
        first = await task.artifact(["chunk one, "], name="chunks")
        await task.artifact("chunk two", append=True, last_chunk=True, artifact_id=first)
        with pytest.raises(ValueError, match="part 0"):
            await task.artifact({"text": "a", "url": "b"})
        with pytest.raises(ValueError, match="at least one part"):
            await task.artifact([])

    record = await run_one(python_agent(produce))
    assert record.state == TaskState.COMPLETED
    parts = {artifact["name"]: artifact["parts"] for artifact in record.artifacts}
    assert parts["text"] == [{"text": "plain text"}]
    assert parts["bytes"] == [{"raw": "AAE="}]
    assert parts["url"] == [{"url": "https://example.com/a.png", "mediaType": "image/png",
                             "filename": "a.png"}]
    assert parts["data"] == [{"data": {"rows": [1, 2]}, "mediaType": "application/json"}]
    assert parts["chunks"] == [{"text": "chunk one, "}, {"text": "chunk two"}]


async def test_input_required_returns_the_follow_up_text() -> None:
    async def asks(task: TaskContext) -> str:
        answer = await task.input_required("name?")
        await task.status(f"got {answer}")
        return answer

    store = TaskStore(python_agent(asks), GateConfig(), TraceBus())
    record = store.send(user_message("start"), OPERATOR)
    await store.settled(record)
    assert record.state == TaskState.INPUT_REQUIRED
    store.send(user_message("Ada", taskId=record.id), OPERATOR)
    await store.settled(record)
    assert result_text(record) == "Ada"


async def test_reject_and_reply_through_the_context() -> None:
    async def rejects(task: TaskContext) -> None:
        await task.reject("no")

    async def replies(task: TaskContext) -> None:
        await task.reply("a message")

    rejected = await run_one(python_agent(rejects))
    replied = await run_one(python_agent(replies))
    assert rejected.state == TaskState.REJECTED
    assert replied.reply is not None and replied.reply["parts"] == [{"text": "a message"}]


# --- calls and turns ---------------------------------------------------------------


class FakeCalls:
    """Stands in for gateway.proxy.call_member.MemberCalls."""

    def __init__(self, peers: Iterable[str]) -> None:
        self.peers = tuple(peers)
        self.http = object()
        self._calls: list[tuple[str, str]] = []
        self.answered = 0
        self.closed = False

    @property
    def calls(self) -> tuple[tuple[str, str], ...]:
        return tuple(self._calls)

    def unanswered(self) -> list[Any]:
        return self._calls[self.answered:]

    async def call_member(self, name: str, text: str) -> int:
        self._calls.append((name, text))
        return len(self._calls)

    async def answers(self, handles: Iterable[Any] | None = None) -> str:
        chosen = list(self._calls if handles is None else handles)
        self.answered = len(self._calls)
        return "\n\n".join(f"member:{name}\n{text.upper()}" for name, text in chosen)

    async def cancel_outstanding(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


async def test_unanswered_calls_bring_a_second_turn_with_the_replies() -> None:
    made: list[FakeCalls] = []
    turns: list[tuple[int, str]] = []

    def factory(run: TaskRun) -> FakeCalls:
        made.append(FakeCalls(["coder", "reviewer"]))
        return made[-1]

    async def delegates(task: TaskContext) -> str:
        turns.append((task.turn, task.replies))
        if task.turn == 1:
            assert task.peers == ("coder", "reviewer")
            assert task.http is made[0].http
            await task.call_member("coder", "write it")
            await task.call_member("reviewer", "check it")
            return "first draft"
        return "final: " + task.replies.replace("\n", " ")

    record = await run_one(python_agent(delegates, AgentEnvironment(max_turns=4), factory))
    assert [turn for turn, _ in turns] == [1, 2]
    assert turns[1][1] == "member:coder\nWRITE IT\n\nmember:reviewer\nCHECK IT"
    assert result_text(record) == "final: member:coder WRITE IT  member:reviewer CHECK IT"
    assert made[0].closed


async def test_with_no_turn_left_unanswered_calls_are_cancelled() -> None:
    calls = FakeCalls(["coder"])
    turns: list[int] = []

    async def delegates(task: TaskContext) -> str:
        turns.append(task.turn)
        await task.call_member("coder", "x")
        return "gave up waiting"

    record = await run_one(python_agent(delegates, AgentEnvironment(max_turns=1),
                                        lambda run: calls))
    assert turns == [1]
    assert result_text(record) == "gave up waiting"
    assert calls.closed and calls.answered == 0


async def test_a_calls_object_without_peers_offers_http_but_not_call_member() -> None:
    seen: dict[str, bool] = {}

    async def look(task: TaskContext) -> None:
        seen["call"] = hasattr(task, "call_member")
        seen["answers"] = hasattr(task, "answers")
        seen["http"] = hasattr(task, "http")

    await run_one(python_agent(look, calls_factory=lambda run: FakeCalls([])))
    assert seen == {"call": False, "answers": False, "http": True}


async def test_a_member_that_may_delegate_has_delegate_and_answers_but_not_call_member(
        ) -> None:
    seen: dict[str, Any] = {}

    class Delegating(FakeCalls):
        spawn = ("local/summarizer",)

        async def delegate(self, capsule: str, text: str) -> int:
            return await self.call_member(capsule, text)

    calls = Delegating([])

    async def look(task: TaskContext) -> None:
        seen["delegate"] = hasattr(task, "delegate")
        seen["answers"] = hasattr(task, "answers")
        seen["call"] = hasattr(task, "call_member")

    await run_one(python_agent(look, calls_factory=lambda run: calls))
    assert seen == {"delegate": True, "answers": True, "call": False}


async def test_without_spawn_allow_delegate_is_missing_and_says_why() -> None:
    seen: dict[str, str] = {}

    async def look(task: TaskContext) -> None:
        try:
            task.delegate  # noqa: B018 - reading it is the test
        except AttributeError as missing:
            seen["why"] = str(missing)

    await run_one(python_agent(look, calls_factory=lambda run: FakeCalls(["coder"])))
    assert "capabilities.spawn.allow" in seen["why"]


# --- command agents ----------------------------------------------------------------


async def test_a_command_gets_the_text_on_stdin_and_its_stdout_is_the_result(
        tmp_path: Path) -> None:
    (tmp_path / "run.py").write_text(textwrap.dedent("""
        import os, sys
        text = sys.stdin.read()
        keys = sorted(k for k in os.environ if k.startswith("MURMUR") or k == "ALLOWED")
        print(os.environ["MURMUR_TASK_ID"] + "|" + text.upper() + "|" + ",".join(keys))
    """))
    environment = AgentEnvironment(env={"ALLOWED": "1", "MURMUR_FORMATION_PEERS":
                                        "coder=http://coder.formation.invalid"})
    agent = command_agent(["python3", "run.py"], tmp_path, environment)
    record = await run_one(agent, "shout")
    task_id, text, keys = result_text(record).split("|")
    assert task_id == record.id and text == "SHOUT"
    assert keys == "ALLOWED,MURMUR_FORMATION_PEERS,MURMUR_TASK_ID", (
        "what the runtime hands it (env.allow and the peers), nothing of the runtime's own")


async def test_a_command_that_exits_non_zero_fails_the_task(tmp_path: Path) -> None:
    agent = command_agent([sys.executable, "-c",
                           "import sys; sys.stderr.write('boom happened\\n'); sys.exit(3)"],
                          tmp_path)
    record = await run_one(agent)
    assert record.state == TaskState.FAILED
    assert record.status["message"]["parts"][0]["text"] == (
        "the command exited with status 3: boom happened")


async def test_cancel_terminates_the_command_and_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(60)
    """)
    agent = command_agent([sys.executable, "-c", script], tmp_path,
                          AgentEnvironment(terminate_grace=0.3))
    store = TaskStore(agent, GateConfig(), TraceBus())
    record = store.send(user_message("forever"), OPERATOR)
    for _ in range(500):
        if pid_file.exists() and len(pid_file.read_text().split()) == 2:
            break
        await asyncio.sleep(0.01)
    pids = [int(pid) for pid in pid_file.read_text().split()]
    store.cancel(record)
    await asyncio.wait_for(store.drained(), 10)
    assert record.state == TaskState.CANCELED
    for pid in pids:
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.01)
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"process {pid} outlived its cancelled task")


async def test_a_command_killed_by_a_signal_says_so(tmp_path: Path) -> None:
    agent = command_agent([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"],
                          tmp_path)
    record = await run_one(agent)
    assert record.status["message"]["parts"][0]["text"] == "the command was killed by signal 9"


def test_a_command_not_on_the_path_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(CapsuleError, match="not on the PATH"):
        command_agent(["no-such-program-xyz"], tmp_path)
    with pytest.raises(CapsuleError, match="non-empty list"):
        command_agent([], tmp_path)


async def test_load_agent_builds_either_kind(tmp_path: Path) -> None:
    root, module = capsule(tmp_path, "async def run(task):\n    return 'py'\n")
    (root / "run.sh").write_text("echo sh\n")
    python = await run_one(load_agent(root, python=f"{module}:run"))
    command = await run_one(load_agent(root, command=["sh", "run.sh"]))
    assert result_text(python) == "py" and result_text(command) == "sh"
