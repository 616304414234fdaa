"""Agents from other frameworks as gateway members (docs/frameworks/), each a real server
of that framework on an offline model (tests/agents/frameworks/NAME/server.py), run from a
virtual environment of its own outside the checkout and every path the sandbox grants
(``make frameworks``), always with ``--isolation required``:

- alone, as a formation's entry member, answering ``mur run --roster --task``;
- called by a ``python`` member of ours through the formation proxy;
- streamed to an A2A 1.0 client (a2a-sdk's) at the door, which speaks A2A 0.3 to the
  0.3 frameworks (strands-agents, crewai, BeeAI, google-adk on a2a-sdk 0.3) and 1.0 to
  the rest.

Microsoft Agent Framework runs in both of its executor's modes, from one venv:
``maf`` (``A2AExecutor(stream=False)``, its default: the answer is a WORKING status
message, and the task completes with none, so the answer is read from its history) and
``maf_stream`` (``stream=True``: the answer as artifact chunks).

Run by ``make test-frameworks`` (``.ci/run`` runs it); a framework whose venv is missing
skips, naming the target that makes it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.sandbox.landlock import host_support
from tests.support.formation import (
    install_capsule,
    launcher_env,
    mur,
    read_formation_line,
    start_launcher,
    write_capsule,
    write_roster,
)
from tests.support.gateway_capsules import gateway_capsule

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not host_support().files, reason="this kernel has no Landlock: the "
                       "frameworks are run confined here"),
]

AGENTS = Path(__file__).resolve().parents[1] / "agents" / "frameworks"
VENVS = Path(os.environ.get("MURMUR_FRAMEWORK_VENVS",
                            Path.home() / ".cache" / "murmur-door" / "frameworks"))
RUN_S = 240.0


@dataclass(frozen=True)
class Framework:
    """One framework's agent: its folder under tests/agents/frameworks and the A2A
    version its server speaks."""

    name: str
    a2a: str
    #: What its capsule says beside ``agent.a2a`` (a line indented under ``agent:``).
    agent_extra: str = ""
    #: The folder of its server.py, when another's (its own holds requirements.txt only).
    server_of: str = ""
    #: The name of its venv, when another's (the same framework in another mode).
    venv_of: str = ""
    #: What its server is started with after ``--port {port} --name agent``.
    server_args: tuple[str, ...] = ()

    @property
    def venv(self) -> Path:
        return VENVS / (self.venv_of or self.name)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def require(self) -> None:
        if not (self.venv / ".installed").exists():
            pytest.skip(f"{self.venv.name}'s venv is not installed under {VENVS} "
                        "(make frameworks makes it)")


FRAMEWORKS = [Framework("pydantic_ai", "1.0",
                        # fasta2a's card says application/json only; its agents take text
                        "  input_modes: [text/plain, application/json]"),
              Framework("adk", "1.0"),
              Framework("adk_v03", "0.3", server_of="adk"), Framework("strands", "0.3"),
              Framework("crewai", "0.3"),
              # A2AExecutor(stream=False): the answer is in the task's history only
              Framework("maf", "1.0"),
              Framework("maf_stream", "1.0", server_of="maf", venv_of="maf",
                        server_args=("--stream",)),
              Framework("beeai", "0.3")]
CALLER_AGENT = """
async def run(task):
    answer = await (await task.call_member("agent", task.text))
    return f"caller got: {answer}"
"""


@pytest.fixture(params=FRAMEWORKS, ids=[f.name for f in FRAMEWORKS])
def framework(request: pytest.FixtureRequest) -> Framework:
    chosen: Framework = request.param
    chosen.require()
    return chosen


def project_of(tmp_path: Path, framework: Framework, *, with_caller: bool) -> Path:
    """A project whose member ``agent`` is the framework's server, started from its venv
    (and, ``with_caller``, a ``python`` entry member ``caller`` that calls it)."""
    source = gateway_capsule(tmp_path / "src" / "agent", "agent",
                             [str(framework.python), "server.py", "--port", "{port}",
                              "--name", "agent", *framework.server_args])
    shutil.copy(AGENTS / (framework.server_of or framework.name) / "server.py",
                source / "server.py")
    if framework.agent_extra:
        manifest = source / "murmur.yaml"
        manifest.write_text(manifest.read_text().replace(
            "\nexports:", f"\n{framework.agent_extra}\nexports:", 1))
    project = tmp_path / "project"
    project.mkdir()
    install_capsule(project, source)
    if with_caller:
        install_capsule(project, write_capsule(tmp_path / "caller-src", "caller", CALLER_AGENT,
                                               allow_localhost=True))
        write_roster(project, [("caller", True), ("agent", False)], {"caller": ["agent"]})
    else:
        write_roster(project, [("agent", True)])
    return project


def run_task(project: Path, murmur_home: Path, text: str) -> subprocess.CompletedProcess[str]:
    return mur("run", "--roster", "--project", str(project), "--task", text,
               "--isolation", "required", env=launcher_env(MURMUR_HOME=str(murmur_home)),
               cwd=project, timeout=RUN_S)


def test_the_agent_answers_a_task_alone(framework: Framework, tmp_path: Path,
                                        murmur_home: Path) -> None:
    done = run_task(project_of(tmp_path, framework, with_caller=False), murmur_home, "hello")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "agent heard: hello" in done.stdout


def test_a_python_member_calls_the_agent(framework: Framework, tmp_path: Path,
                                         murmur_home: Path) -> None:
    done = run_task(project_of(tmp_path, framework, with_caller=True), murmur_home, "ping")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "caller got: " in done.stdout and "agent heard: ping" in done.stdout


@pytest.fixture
def running(framework: Framework, tmp_path: Path, murmur_home: Path
            ) -> Iterator[tuple[str, str]]:
    """The framework's member running alone (no --task): its door URL and the operator
    token of its session."""
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    project = project_of(tmp_path, framework, with_caller=False)
    process = start_launcher(project, "--json", "--isolation", "required", env=env)
    try:
        line = read_formation_line(process, timeout=RUN_S)
        (member,) = line["members"]
        (token_file,) = (murmur_home / "records").rglob(f"{member['session_id']}/operator.token")
        yield member["door_url"], token_file.read_text().strip()
    finally:
        if process.poll() is None:
            mur("stop", line["formation_id"], env=env, timeout=60)
        process.communicate(timeout=60)


def sse_results(text: str) -> list[dict[str, Any]]:
    return [json.loads(row[5:])["result"] for row in text.splitlines()
            if row.startswith("data:")]


def test_a_stream_reaches_an_a2a_1_0_client_through_the_door(
        framework: Framework, running: tuple[str, str]) -> None:
    door, token = running
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
               "parts": [{"text": "stream this"}]}
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0",
               "Accept": "text/event-stream"}
    with httpx.Client(timeout=120) as client:
        streamed = client.post(door + "/", headers=headers, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": message}})
        assert streamed.status_code == 200, streamed.text
        events = sse_results(streamed.text)
        assert events, streamed.text
        kinds = {next(iter(event)) for event in events}
        assert kinds <= {"task", "message", "statusUpdate", "artifactUpdate"}, kinds
        text = json.dumps(events)
        assert "heard: stream" in text and '"kind"' not in text
        task_id = next((event["task"]["id"] for event in events if "task" in event), None)
        if task_id is None:  # a stream that starts with an update names its task there
            first = events[0]
            task_id = (first.get("statusUpdate") or first.get("artifactUpdate") or {}
                       ).get("taskId")
        if task_id is not None:
            got = client.post(door + "/", headers={**headers, "Accept": "application/json"},
                              json={"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                                    "params": {"id": task_id, "historyLength": 0}}).json()
            assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED", got
            assert "history" not in got["result"]
        card = client.get(door + "/.well-known/agent-card.json",
                          headers={"Authorization": f"Bearer {token}"}).json()
    assert {entry["protocolVersion"] for entry in card["supportedInterfaces"]} == {"1.0"}
