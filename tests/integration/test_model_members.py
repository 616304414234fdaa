"""Model members (docs/llm.md) in real formations, against an OpenAI-compatible server
the test runs on loopback (tests/support/fake_openai.py): a planner model that calls a
worker model through ``call_member`` and continues with the fenced answer on its next
turn; the ``[Capsule]`` block at the head of the system prompt; a command tool and its
record; ``max_turns`` and the budget ending a task with their codes; each error path's
message; the key absent from every file, every line of output and every request body."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.home import paths
from tests.support.fake_openai import FakeOpenAI, Reply, SeenRequest, error, text, tools
from tests.support.formation import (
    kill_group_quietly,
    launcher_env,
    member_traces,
    mur,
    start_launcher,
)
from tests.support.model_members import FAKE_KEY, KEY_ENV, model_project

pytestmark = pytest.mark.integration


def planner_and_worker(body: dict[str, Any], seen: SeenRequest) -> Reply:
    """The worker answers at once; the planner calls the worker, says it waits, and
    answers with what the fenced reply said."""
    messages = body["messages"]
    last = messages[-1]
    if "member: worker" in seen.system:
        return text(f"summary of <{messages[1]['content']}>")
    if last["role"] == "user" and "```member:worker" in last["content"]:
        return text("final: " + last["content"].split("\n")[1])
    if last["role"] == "tool":
        return text("asked the worker")
    return tools(("call_member", {"member": "worker", "task": "summarize " + last["content"]}))


@pytest.fixture
def launched() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        kill_group_quietly(process)
        process.wait()


def run_formation(project: Path, launched: list[subprocess.Popen[bytes]], task: str,
                  **env: str) -> tuple[int, str, str]:
    process = start_launcher(project, "--json", "--task", task,
                             env=launcher_env(**{KEY_ENV: FAKE_KEY, **env}))
    launched.append(process)
    out, err = process.communicate(timeout=120)
    return process.returncode, out.decode(), err.decode()


def files_holding(root: Path, needle: bytes) -> list[Path]:
    found = []
    for current, _dirs, names in os.walk(root):
        for name in names:
            path = Path(current) / name
            if not path.is_symlink() and needle in path.read_bytes():
                found.append(path)
    return found


def test_a_planner_model_calls_a_worker_model_and_answers_with_its_fenced_answer(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    with FakeOpenAI(planner_and_worker) as fake:
        project = model_project(tmp_path, fake.base_url, {"planner": {}, "worker": {}},
                                entry="planner", reachability={"planner": ["worker"]})
        code, out, err = run_formation(project, launched, "the quarterly report")
    assert code == 0, err
    line, *rest = out.splitlines()
    formation = json.loads(line)
    assert "\n".join(rest).endswith("final: summary of <summarize the quarterly report>")
    # The planner made three requests: the call, the text that ended its turn, and the
    # turn with the worker's answer fenced under member:worker.
    planner = [seen for seen in fake.requests if "member: planner" in seen.system]
    worker = [seen for seen in fake.requests if "member: worker" in seen.system]
    assert len(planner) == 3 and len(worker) == 1
    system = planner[0].system
    assert system.startswith("[Capsule]\ncapsule: local/planner 1.0.0\nmember: planner\n"
                             f"formation: {formation['formation_id']}\n")
    assert "- worker: The worker model member." in system
    assert "## Identity" in system and "Roster name: planner" in system
    assert "formation.invalid" not in system and "127.0.0.1" not in system
    offered = [tool["function"] for tool in planner[0].body["tools"]]
    assert offered[0]["name"] == "call_member"
    assert offered[0]["parameters"]["properties"]["member"]["enum"] == ["worker"]
    assert "tools" not in worker[0].body, "the worker may call nobody"
    assert planner[2].body["messages"][-1]["content"].startswith("```member:worker\n")
    assert all(seen.headers["Authorization"] == f"Bearer {FAKE_KEY}"
               for seen in fake.requests)
    assert not any(FAKE_KEY.encode() in seen.raw for seen in fake.requests)
    # The trace: a model_call per request, with tokens; no prompt text without
    # trace.content.
    traces = member_traces(paths.records_root())
    calls = [r for r in traces["planner"] if r["event"] == "model_call"]
    assert [r["turn"] for r in calls] == [1, 2, 3]
    assert calls[0]["tools"] == ["call_member"] and calls[0]["input_tokens"] == 10
    assert "prompt" not in calls[0] and "output" not in calls[0]
    tool_calls = [r for r in traces["planner"] if r["event"] == "tool_call"]
    assert [(r["tool"], r["outcome"]) for r in tool_calls] == [("call_member", "ok")]
    # mur trace show --tree: the requests and the tool run under the planner's task,
    # the worker's task under the call.
    tree = mur("trace", "show", formation["formation_id"], "--tree",
               env=launcher_env(MURMUR_HOME=str(murmur_home)))
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[1].startswith("planner  task "), tree.stdout
    steps = [line.split(": ", 1)[0] for line in lines if "· " in line]
    assert steps == ["├─ · model fake-model turn 1", "│  └─ · model fake-model turn 1",
                     "├─ · tool call_member", "├─ · model fake-model turn 2",
                     "└─ · model fake-model turn 3"], tree.stdout
    assert any(line.startswith("├─ → worker  task ") for line in lines), tree.stdout
    assert "10+5 tokens" in lines[lines.index(next(line for line in lines
                                                   if "turn 1" in line))]
    # The key: in no file, no line of output.
    assert FAKE_KEY not in out + err + tree.stdout
    assert files_holding(murmur_home, FAKE_KEY.encode()) == []
    assert files_holding(project, FAKE_KEY.encode()) == []


def test_a_command_tool_runs_in_the_sandbox_and_its_result_reaches_the_model(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    def script(body: dict[str, Any], seen: SeenRequest) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text(f"the tool said {last['content'].strip()}")
        return tools(("shout", {"input": "quiet words"}))

    with FakeOpenAI(script) as fake:
        project = model_project(tmp_path, fake.base_url, {"solo": {
            "tools": "tools:\n  - command: {name: shout, argv: [python3, shout.py], "
                     "description: Upper-cases its input.}",
            "files": {"shout.py": "import os, sys\nprint(sys.stdin.read().upper(), "
                                  f"os.environ.get('{KEY_ENV}', 'no key'))\n"},
            "content": True}}, entry="solo", reachability={})
        code, out, err = run_formation(project, launched, "go")
    assert code == 0, err
    assert out.splitlines()[-1] == "the tool said QUIET WORDS no key"
    offered = [tool["function"]["name"] for tool in fake.requests[0].body["tools"]]
    assert offered == ["shout"]
    trace = member_traces(paths.records_root())["solo"]
    [record] = [r for r in trace if r["event"] == "tool_call"]
    assert record["tool"] == "shout" and record["outcome"] == "ok"
    assert record["arguments"] == '{"input": "quiet words"}'
    first = [r for r in trace if r["event"] == "model_call"][0]
    assert "go" in first["prompt"] and first["output"] == ""


MCP_SERVER = """
from mcp.server.fastmcp import FastMCP

app = FastMCP("words")


@app.tool()
def count_words(text: str) -> str:
    \"\"\"Counts the words of a text.\"\"\"
    return f"{len(text.split())} words"


app.run()
"""


def test_an_mcp_tool_is_offered_by_its_schema_and_called_in_the_sandbox(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    def script(body: dict[str, Any], seen: SeenRequest) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text(f"counted: {last['content']}")
        return tools(("count_words", {"text": "one two three"}))

    with FakeOpenAI(script) as fake:
        project = _solo(tmp_path, fake.base_url, files={"tools/server.py": MCP_SERVER},
                        tools=f"tools:\n  - mcp: [{sys.executable}, tools/server.py]")
        code, out, err = run_formation(project, launched, "count")
    assert code == 0, err
    assert out.splitlines()[-1] == "counted: 3 words"
    [offered] = [tool["function"] for tool in fake.requests[0].body["tools"]]
    assert offered["name"] == "count_words"
    assert offered["description"] == "Counts the words of a text."
    assert offered["parameters"]["properties"]["text"]["type"] == "string"
    trace = member_traces(paths.records_root())["solo"]
    assert [(r["tool"], r["outcome"]) for r in trace if r["event"] == "tool_call"] == [
        ("count_words", "ok")]


def test_an_mcp_server_that_does_not_start_fails_the_task_naming_it(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    with FakeOpenAI(lambda body, seen: text("never")) as fake:
        project = _solo(tmp_path, fake.base_url, files={"tools/broken.py": "raise SystemExit(3)\n"},
                        tools=f"tools:\n  - mcp: [{sys.executable}, tools/broken.py]")
        code, out, err = run_formation(project, launched, "count")
    assert code == 1
    assert "E-RUN-064" in out + err and "tools/broken.py" in out + err
    assert fake.requests == []


def test_a_streaming_client_sees_the_model_text_as_artifact_chunks(
        tmp_path: Path, murmur_home: Path) -> None:
    from tests.support.member import install_capsule, member_env, read_ready, start_member
    from tests.support.model_members import write_model_capsule

    with FakeOpenAI(lambda body, seen: text("one two three four")) as fake:
        project = tmp_path / "project"
        project.mkdir()
        install_capsule(project, write_model_capsule(tmp_path / "src", "solo", fake.base_url))
        member = read_ready(start_member(project, "local/solo", "--json", env=member_env(
            murmur_home, **{KEY_ENV: FAKE_KEY})))
        try:
            chunks, states = [], []
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                    "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                                           "parts": [{"text": "count"}]}}}
            headers = {"Authorization": f"Bearer {member.token}", "A2A-Version": "1.0",
                       "Accept": "text/event-stream"}
            with httpx.stream("POST", member.door + "/", json=body, headers=headers,
                              timeout=30) as response:
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    result = json.loads(line[5:])["result"]
                    if "artifactUpdate" in result:
                        update = result["artifactUpdate"]
                        chunks.append(("".join(part.get("text", "") for part in
                                               update["artifact"]["parts"]),
                                       bool(update.get("lastChunk"))))
                    if "statusUpdate" in result:
                        states.append(result["statusUpdate"]["status"]["state"])
            metrics = httpx.get(member.door + "/metrics", timeout=10, headers={
                "Authorization": f"Bearer {member.token}"}).text
        finally:
            member.kill()
    assert [piece for piece, _ in chunks] == ["one", " two", " three", " four", ""]
    assert [last for _, last in chunks] == [False, False, False, False, True]
    assert states[-1] == "TASK_STATE_COMPLETED"
    # The endpoint's usage counted by member, model and kind.
    assert ('murmur_model_tokens_total{kind="input",member="local/solo",model="fake-model"} '
            '10.0') in metrics, metrics
    assert ('murmur_model_tokens_total{kind="output",member="local/solo",model="fake-model"}'
            ' 5.0') in metrics


def test_a_model_delegates_to_a_child_capsule_and_reads_its_fenced_answer(
        tmp_path: Path, murmur_home: Path) -> None:
    from tests.support.member import install_capsule, member_env, start_member
    from tests.support.model_members import write_model_capsule

    def script(body: dict[str, Any], seen: SeenRequest) -> Reply:
        last = body["messages"][-1]
        if "capsule: local/helper" in seen.system:
            return text("helped with " + body["messages"][1]["content"])
        if last["role"] == "user" and last["content"].startswith("```child:helper"):
            return text("boss: " + last["content"].split("\n")[1])
        if last["role"] == "tool":
            return text("")
        return tools(("delegate", {"capsule": "local/helper", "task": "the chores"}))

    with FakeOpenAI(script) as fake:
        project = tmp_path / "project"
        project.mkdir()
        for name, spawn in (("helper", ""), ("boss", "{allow: [local/helper]}")):
            install_capsule(project, write_model_capsule(
                tmp_path / "src", name, fake.base_url, authenticated=False, spawn=spawn))
        process = start_member(project, "local/boss", "--task", "go",
                               env=member_env(murmur_home, **{KEY_ENV: FAKE_KEY}))
        out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode()
    assert out.decode().strip() == "boss: helped with the chores"
    [boss_first, *_] = [seen for seen in fake.requests if "capsule: local/boss" in seen.system]
    assert "may delegate to (with the delegate tool): local/helper" in boss_first.system
    offered = [tool["function"] for tool in boss_first.body["tools"]]
    assert [tool["name"] for tool in offered] == ["delegate"]
    assert offered[0]["parameters"]["properties"]["capsule"]["enum"] == ["local/helper"]


def _solo(tmp_path: Path, base_url: str, **options: Any) -> Path:
    return model_project(tmp_path, base_url, {"solo": options}, entry="solo", reachability={})


def test_max_turns_ends_the_task_with_its_code(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    with FakeOpenAI(lambda body, seen: tools(("shout", {"input": "again"}))) as fake:
        project = _solo(tmp_path, fake.base_url, max_turns=2, tools=(
            "tools:\n  - command: {name: shout, argv: [cat]}"))
        code, out, err = run_formation(project, launched, "loop")
    assert code == 1
    assert len(fake.requests) == 2
    assert "E-RUN-062" in out + err and "inference.max_turns" in out + err


def test_the_token_budget_ends_the_task_with_its_code(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    def script(body: dict[str, Any], seen: SeenRequest) -> Reply:
        return tools(("shout", {"input": "x"}), usage=(300, 50))

    with FakeOpenAI(script) as fake:
        project = _solo(tmp_path, fake.base_url, budget=500,
                        tools="tools:\n  - command: {name: shout, argv: [cat]}")
        code, out, err = run_formation(project, launched, "spend")
    assert code == 1
    assert len(fake.requests) == 2
    assert "E-RUN-063" in out + err and "700 tokens" in out + err


@pytest.mark.parametrize(("case", "code", "named"), [
    ("missing key", "E-RUN-057", KEY_ENV),
    ("refused key", "E-RUN-059", KEY_ENV),
    ("unreachable", "E-RUN-060", "127.0.0.1"),
    ("outside the grant", "E-RUN-058", "127.0.0.1"),
])
def test_each_endpoint_failure_names_the_variable_or_the_host(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]],
        case: str, code: str, named: str) -> None:
    with FakeOpenAI(lambda body, seen: error(401, "bad key") if case == "refused key"
                    else text("fine")) as fake:
        base_url = fake.base_url
        options: dict[str, Any] = {}
        if case == "unreachable":
            base_url = "http://127.0.0.1:9/v1"
        if case == "outside the grant":
            options["allow"] = ("api.example.com",)
        env = {KEY_ENV: ""} if case == "missing key" else {}
        if case == "outside the grant":
            # Admission refuses a literal base URL outside the grant; read from a
            # variable, the driver refuses it before any request.
            options["env_allow"] = (KEY_ENV, "FAKE_MODEL_URL")
            env["FAKE_MODEL_URL"] = base_url
            base_url = "${FAKE_MODEL_URL}"
        project = _solo(tmp_path, base_url, **options)
        exit_code, out, err = run_formation(project, launched, "hello", **env)
    assert exit_code == 1, err
    said = out + err
    assert code in said and named in said, said
    assert FAKE_KEY not in said
    if case in ("missing key", "outside the grant", "unreachable"):
        assert fake.requests == []


def test_a_429_and_a_500_are_retried_within_the_deadline(
        tmp_path: Path, murmur_home: Path, launched: list[subprocess.Popen[bytes]]) -> None:
    answers = iter([error(429, "slow down", retry_after=0.1), error(500, "oops"),
                    text("third time")])
    with FakeOpenAI(lambda body, seen: next(answers)) as fake:
        project = _solo(tmp_path, fake.base_url)
        code, out, err = run_formation(project, launched, "hello")
    assert code == 0, err
    assert out.splitlines()[-1] == "third time"
    assert len(fake.requests) == 3
    [record] = [r for r in member_traces(paths.records_root())["solo"]
                if r["event"] == "model_call"]
    assert record["attempts"] == 3
