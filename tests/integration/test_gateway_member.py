"""One gateway member (``agent.a2a``) run as a real formation member, with a channel the
test hands it the way the launcher does, in front of a real third-party A2A server: the
a2a-sdk agent (``tests/agents/sdk_agent.py``) and, for a few core checks, the
@a2a-js/sdk agent (``tests/agents/js/server.mjs``).

The test holds the formation key, so it mints the callers' tokens itself: ``planner``
and ``helper`` may call the gateway member, ``other`` holds a token for the ``worker``
member (a python agent of ours, the gateway member's one callee).

Order: helpers (capsules, processes, the a2a-sdk client), the module's formation, then
the door's refusals, per-caller visibility, streaming, no token upstream, the forward
proxy and its refusals, the Node agent, and last kill -9 of the upstream (its own
formation).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)

from gateway.auth.tokens import FormationKey
from tests.support import member as support
from tests.support import third_party
from tests.support.gateway_capsules import first_child, js_capsule, sdk_capsule
from tests.support.member import Channel, Member

pytestmark = pytest.mark.integration

READY_S = 45.0
WORKER_AGENT = '''
async def run(task):
    return f"worker did: {task.text}"
'''


# --------------------------------------------------------------------- capsules, processes


@dataclass
class Running:
    """A member process whose stderr goes to a file the test can read while it runs."""

    member: Member
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def upstream_pid(self) -> int:
        return int(support.wait_for(lambda: first_child(self.member.pid), timeout=10))


def start(project: Path, home: Path, capsule: str, channel: Channel, log: Path,
          *args: str) -> Running:
    env = support.member_env(home, **channel.env())
    argv = [sys.executable, "-m", "launcher.cli", "run", "--capsule", f"local/{capsule}",
            "--capsule-version", "1.0.0", "--project", str(project), "--json", *args]
    with log.open("wb") as err:
        process = subprocess.Popen(argv, cwd=project, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=err,
                                   pass_fds=channel.pass_fds)
    channel.started()
    try:
        member = support.read_ready(process, timeout=READY_S)
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{log.read_text(errors='replace')}") from None
    return Running(member, log)


def stop(running: Running | None, channel: Channel | None) -> None:
    if channel is not None:
        channel.close_lifeline()
    if running is not None:
        try:
            running.member.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            running.member.kill()
    if channel is not None:
        channel.close()


@dataclass
class Formation:
    """worker and one gateway member (``name``), and the callers' tokens."""

    formation_id: str
    key: FormationKey
    gateway: Running
    worker: Running
    name: str

    def token(self, caller: str, callee: str | None = None) -> str:
        return self.key.mint(formation=self.formation_id, caller=caller,
                             callee=callee or self.name)

    @property
    def door(self) -> str:
        return self.gateway.member.door


@contextlib.contextmanager
def formation(root: Path, capsule_source: Path, name: str) -> Iterator[Formation]:
    project = root / "project"
    home = root / "home"
    project.mkdir(parents=True, exist_ok=True)
    home.mkdir(mode=0o700, exist_ok=True)
    support.install_capsule(project, capsule_source)
    support.install_capsule(project, support.write_capsule(
        root / "src" / "worker", "worker", peer_tasks=True, agent=WORKER_AGENT))
    formation_id, key = support.new_formation()
    worker_channel = Channel(formation_id, key, "worker")
    gateway_channel: Channel | None = None
    worker = gateway = None
    try:
        worker_channel.send_credentials()
        worker = start(project, home, "worker", worker_channel, root / "worker.stderr")
        gateway_channel = Channel(formation_id, key, name, ("worker",))
        gateway_channel.send_credentials()
        gateway_channel.writer.write_doors({"worker": worker.member.door})
        gateway = start(project, home, name, gateway_channel, root / f"{name}.stderr")
        yield Formation(formation_id, key, gateway, worker, name)
    finally:
        stop(gateway, gateway_channel)
        stop(worker, worker_channel)


# --------------------------------------------------------------------- the a2a-sdk client


@asynccontextmanager
async def a2a_client(door: str, token: str, *, streaming: bool = False) -> AsyncIterator[Client]:
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=30.0, headers=headers) as http:
        config = ClientConfig(streaming=streaming, httpx_client=http)
        client = await ClientFactory(config).create_from_url(door)
        try:
            yield client
        finally:
            await client.close()


def user_message(text: str, *, at_once: bool = False) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=message, configuration=SendMessageConfiguration(
        return_immediately=at_once))


async def send(door: str, token: str, text: str, *, at_once: bool = False) -> Task:
    """SendMessage with a2a-sdk's client: blocking, or ``at_once`` (returnImmediately)."""
    async with a2a_client(door, token) as client:
        events = [event async for event in client.send_message(
            user_message(text, at_once=at_once))]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


def answer(task: Task) -> str:
    return "\n".join(part.text for artifact in task.artifacts for part in artifact.parts)


def state(task: Task) -> str:
    return str(TaskState.Name(task.status.state))


def rpc(door: str, token: str | None, method: str, params: dict[str, Any],
        *, authorization: str | None = None) -> httpx.Response:
    headers = {"A2A-Version": "1.0"}
    if authorization is not None:
        headers["Authorization"] = authorization
    elif token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(door + "/", timeout=15.0, headers=headers,
                      json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def send_params(text: str) -> dict[str, Any]:
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                        "parts": [{"text": text}]}}


def upstream_requests(running: Running, name: str) -> list[str]:
    return [line for line in running.stderr().splitlines()
            if line.startswith(f"{name} request: ")]


def third_party_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie does not)."""
    from tests.support.formation import alive
    return alive(pid)


def environ_of(pid: int) -> dict[str, str]:
    data = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = [item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item]
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def chunk_times(events: list[tuple[Any, float]]) -> list[tuple[str, float]]:
    """(text, arrival) of every status event that carries a message."""
    chunks = []
    for event, at in events:
        update = event.status_update
        if event.HasField("status_update") and update.status.message.parts:
            chunks.append((update.status.message.parts[0].text, at))
    return chunks


async def stream_as_operator(formation: Formation, text: str) -> list[tuple[str, float]]:
    """SendStreamingMessage with the operator token (a formation token may not stream)."""
    arrived = []
    async with a2a_client(formation.door, formation.gateway.member.token,
                          streaming=True) as client:
        async for event in client.send_message(user_message(text)):
            arrived.append((event, time.monotonic()))
    return chunk_times(arrived)


async def subscribe_as_caller(formation: Formation, caller: str,
                              text: str) -> list[tuple[str, float]]:
    """A caller's task sent with returnImmediately, then followed with SubscribeToTask."""
    token = formation.token(caller)
    task = await send(formation.door, token, text, at_once=True)
    arrived = []
    async with a2a_client(formation.door, token, streaming=True) as client:
        async for event in client.subscribe(SubscribeToTaskRequest(id=task.id)):
            arrived.append((event, time.monotonic()))
    return chunk_times(arrived)


# --------------------------------------------------------------------- the module's formation


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Formation]:
    root = tmp_path_factory.mktemp("gateway-sdk")
    with formation(root, sdk_capsule(root), "sdkbot") as running:
        yield running


# --------------------------------------------------------------------- the door's refusals


def test_the_door_refuses_401_then_403_and_the_upstream_sees_none_of_it(
        sdk: Formation) -> None:
    before = len(upstream_requests(sdk.gateway, "sdkbot"))
    params = send_params("should never arrive")
    missing = rpc(sdk.door, None, "SendMessage", params)
    assert missing.status_code == 401
    assert 'error="invalid_token"' not in missing.headers.get("www-authenticate", "")
    bad = rpc(sdk.door, None, "SendMessage", params, authorization="Bearer mft1.not-a-token")
    assert bad.status_code == 401
    assert 'error="invalid_token"' in bad.headers["www-authenticate"]
    elsewhere = rpc(sdk.door, sdk.token("planner", "worker"), "SendMessage", params)
    assert elsewhere.status_code == 403, elsewhere.text
    assert "not_permitted" in elsewhere.text
    time.sleep(0.3)
    after = upstream_requests(sdk.gateway, "sdkbot")
    assert len(after) == before, after[before:]
    assert "should never arrive" not in sdk.gateway.stderr()


async def test_a_caller_with_its_token_gets_the_upstreams_answer(sdk: Formation) -> None:
    task = await send(sdk.door, sdk.token("planner"), "hello there")
    assert state(task) == "TASK_STATE_COMPLETED"
    assert answer(task) == "sdkbot heard: hello there"


# --------------------------------------------------------------------- per-caller visibility


async def test_another_callers_task_is_exactly_an_unknown_id(sdk: Formation) -> None:
    planner, helper = sdk.token("planner"), sdk.token("helper")
    task = await send(sdk.door, planner, "slow: 20", at_once=True)
    unknown = "0190a000-0000-7000-8000-" + uuid.uuid4().hex[:12]
    before = len(upstream_requests(sdk.gateway, "sdkbot"))
    for method in ("GetTask", "CancelTask"):
        theirs = rpc(sdk.door, helper, method, {"id": task.id})
        nobodys = rpc(sdk.door, helper, method, {"id": unknown})
        assert theirs.json()["error"]["code"] == -32001, theirs.text
        assert theirs.content.replace(task.id.encode(), b"ID") == \
            nobodys.content.replace(unknown.encode(), b"ID")
    with httpx.stream("POST", sdk.door + "/", timeout=15.0, json={
            "jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task.id}},
            headers={"A2A-Version": "1.0", "Authorization": f"Bearer {helper}",
                     "Accept": "text/event-stream"}) as subscribed:
        body = subscribed.read().decode()
    assert "-32001" in body and "slow" not in body
    # the follow-ups the door itself sends upstream are GetTasks of the planner's task
    # only; none of the helper's requests was relayed
    relayed = upstream_requests(sdk.gateway, "sdkbot")[before:]
    assert not any("CancelTask" in line or "Subscribe" in line for line in relayed)
    # the operator sees it, and the planner still owns it running
    operator = sdk.gateway.member.rpc("GetTask", {"id": task.id})
    assert operator["result"]["id"] == task.id
    assert operator["result"]["status"]["state"] == "TASK_STATE_WORKING"
    helper_list = rpc(sdk.door, helper, "ListTasks", {}).json()["result"]
    planner_list = rpc(sdk.door, planner, "ListTasks", {}).json()["result"]
    operator_list = sdk.gateway.member.rpc("ListTasks", {})["result"]
    assert task.id not in [t["id"] for t in helper_list["tasks"]]
    assert task.id in [t["id"] for t in planner_list["tasks"]]
    assert task.id in [t["id"] for t in operator_list["tasks"]]
    canceled = rpc(sdk.door, planner, "CancelTask", {"id": task.id}).json()
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled


async def test_each_caller_lists_only_its_own_tasks(sdk: Formation) -> None:
    helper = sdk.token("helper")
    mine = await send(sdk.door, helper, "helper's own")
    async with a2a_client(sdk.door, helper) as client:
        got = await client.get_task(GetTaskRequest(id=mine.id))
    assert got.id == mine.id
    listed = rpc(sdk.door, helper, "ListTasks", {}).json()["result"]["tasks"]
    assert mine.id in [t["id"] for t in listed]
    planner_listed = rpc(sdk.door, sdk.token("planner"), "ListTasks", {}).json()
    assert mine.id not in [t["id"] for t in planner_listed["result"]["tasks"]]


# --------------------------------------------------------------------- streaming


def spread(chunks: list[tuple[str, float]], expected: int) -> float:
    stamps = [at for text, at in chunks if text.startswith("chunk")]
    assert len(stamps) == expected, chunks
    return stamps[-1] - stamps[0]


async def test_an_operator_stream_arrives_as_it_is_produced(sdk: Formation) -> None:
    chunks = await stream_as_operator(sdk, "stream: go")
    assert [t for t, _ in chunks if t.startswith("chunk")] == ["chunk 1", "chunk 2", "chunk 3"]
    assert spread(chunks, 3) >= 0.6, chunks


async def test_a_callers_subscription_arrives_as_it_is_produced(sdk: Formation) -> None:
    # subscribed just after the task started: chunk 1 may already be past
    chunks = await subscribe_as_caller(sdk, "planner", "stream: go")
    stamps = [at for text, at in chunks if text.startswith("chunk")]
    assert len(stamps) >= 2 and stamps[-1] - stamps[0] >= 0.3, chunks


def test_a_formation_token_may_not_send_a_streaming_message(sdk: Formation) -> None:
    # docs/door-auth.md: a formation token has exactly SendMessage, GetTask, CancelTask,
    # ListTasks and SubscribeToTask
    refused = rpc(sdk.door, sdk.token("planner"), "SendStreamingMessage",
                  send_params("stream: go"))
    assert refused.status_code == 403
    assert 'error="insufficient_scope"' in refused.headers["www-authenticate"]


# --------------------------------------------------------------------- no token upstream


def test_no_token_reaches_the_upstream_and_its_environment_is_the_proxys(
        sdk: Formation) -> None:
    pid = sdk.gateway.upstream_pid()
    environ = environ_of(pid)
    operator = sdk.gateway.member.token
    raw = Path(f"/proc/{pid}/environ").read_bytes() + Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"mft1." not in raw and operator.encode() not in raw
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "MURMUR_PROXY"):
        assert environ[name].startswith("http://murmur:"), name
    assert len({environ[n] for n in ("HTTP_PROXY", "http_proxy", "MURMUR_PROXY")}) == 1
    assert environ["PORT"].isdigit()
    assert not any(name.lower() in ("no_proxy", "all_proxy") for name in environ)
    log = sdk.gateway.stderr()
    assert upstream_requests(sdk.gateway, "sdkbot"), "the upstream logged no request"
    assert "mft1." not in log and operator not in log
    for line in upstream_requests(sdk.gateway, "sdkbot"):
        assert '"authorization"' not in line.lower()
        assert "x-murmur-" not in line.lower()


# --------------------------------------------------------------------- the forward proxy


def test_the_forward_proxy_wants_its_credentials(sdk: Formation) -> None:
    proxy = urlsplit(environ_of(sdk.gateway.upstream_pid())["HTTP_PROXY"])
    base = f"http://{proxy.hostname}:{proxy.port}"
    assert proxy.hostname == "127.0.0.1"
    target = "http://worker.formation.invalid/"
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send_params("x")}
    for authorization in (None, "Basic bXVycnVyOndyb25n", "Bearer whatever"):
        headers = {} if authorization is None else {"Proxy-Authorization": authorization}
        with httpx.Client(proxy=base, timeout=10.0) as client:
            refused = client.post(target, json=body, headers=headers)
        assert refused.status_code == 407, refused.text
        assert refused.headers["proxy-authenticate"] == 'Basic realm="murmur"'
    assert "worker did" not in sdk.worker.stderr()


async def test_the_upstream_calls_its_callee_through_the_proxy(sdk: Formation) -> None:
    task = await send(sdk.door, sdk.token("planner"),
                      "call: http://worker.formation.invalid/ fetch it")
    assert answer(task) == "sdkbot was told: worker did: fetch it"
    calls = [r for r in sdk.gateway.member.trace() if r["event"] == "member_call"]
    assert any(r.get("callee") == "worker" for r in calls), calls


@pytest.mark.parametrize("url", [
    "http://planner.formation.invalid/",          # the entry member: no edge
    "http://sdkbot.formation.invalid/",           # itself
    "http://ghost.formation.invalid/",            # no such member
    "http://worker.formation.invalid:80/",        # the callee, not in the exact form
    "http://WORKER.formation.invalid/",
])
async def test_a_refused_address_is_403_formation_refused(sdk: Formation, url: str) -> None:
    task = await send(sdk.door, sdk.token("planner"), f"call: {url} hi")
    text = answer(task)
    assert re.match(r"sdkbot call refused: 403 .*formation_refused", text), text


# --------------------------------------------------------------------- the Node agent


@pytest.fixture(scope="module")
def js(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Formation]:
    third_party.require_node()
    root = tmp_path_factory.mktemp("gateway-js")
    with formation(root, js_capsule(root), "jsbot") as running:
        yield running


async def test_the_node_agent_answers_through_the_door(js: Formation) -> None:
    task = await send(js.door, js.token("planner"), "hello node")
    assert answer(task) == "jsbot heard: hello node"
    task = await send(js.door, js.token("planner"),
                      "call: http://worker.formation.invalid/ from js")
    assert answer(task) == "jsbot was told: worker did: from js"


async def test_the_node_agent_streams_as_it_produces(js: Formation) -> None:
    assert spread(await stream_as_operator(js, "stream: go"), 3) >= 0.6
    chunks = await subscribe_as_caller(js, "planner", "stream: go")
    stamps = [at for text, at in chunks if text.startswith("chunk")]
    assert len(stamps) >= 2 and stamps[-1] - stamps[0] >= 0.3, chunks


async def test_the_node_agents_task_is_hidden_from_another_caller(js: Formation) -> None:
    task = await send(js.door, js.token("planner"), "input: wait")
    got = rpc(js.door, js.token("helper"), "GetTask", {"id": task.id}).json()
    assert got["error"]["code"] == -32001, got
    assert js.gateway.member.rpc("GetTask", {"id": task.id})["result"]["id"] == task.id
    log = js.gateway.stderr()
    assert "mft1." not in log and js.gateway.member.token not in log


# --------------------------------------------------------------------- kill -9 of the upstream


def test_kill_9_of_the_upstream_ends_the_member_failed_e_run_050(tmp_path: Path) -> None:
    with formation(tmp_path, sdk_capsule(tmp_path), "sdkbot") as running:
        pid = running.gateway.upstream_pid()
        member = running.gateway.member
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        status = member.process.wait(timeout=20)
        took = time.monotonic() - killed
        log = running.gateway.stderr()
    assert status == 1, log
    assert "E-RUN-050" in log and "killed by SIGKILL" in log, log
    assert took < 15, took
    support.wait_for(lambda: not third_party_alive(pid), timeout=5)
    end = member.trace()[-1]
    assert end["event"] == "session_end" and end["exit_status"] == "failed", end

