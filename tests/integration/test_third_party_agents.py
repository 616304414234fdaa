"""The third-party test agents standalone (no door yet), each started as a real process and
called with a2a-sdk's own client: the a2a-sdk agent (``tests/agents/sdk_agent.py``) and
the @a2a-js/sdk agent (``tests/agents/js/server.mjs``). Every test runs against both;
the Node one skips, with the reason, where node or its node_modules are missing.

Order: fixtures and client helpers, the card, each behaviour (default, stream, input,
cancel, fail, call through a proxy), then the stderr logs the gateway tests rely on.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)

from tests.support import third_party
from tests.support.third_party import RunningAgent

pytestmark = pytest.mark.integration

Launcher = Callable[..., AbstractContextManager[RunningAgent]]


# --------------------------------------------------------------------- fixtures, helpers


@pytest.fixture(params=["sdk", "js"])
def launch(request: pytest.FixtureRequest) -> Launcher:
    if request.param == "js":
        third_party.require_node()
        return third_party.js_agent
    return third_party.sdk_agent


@pytest.fixture
def agent(launch: Launcher, tmp_path: Path) -> Iterator[RunningAgent]:
    with launch(log_dir=tmp_path) as running:
        yield running


@asynccontextmanager
async def a2a_client(agent: RunningAgent, *, streaming: bool = False,
                     polling: bool = False,
                     headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """a2a-sdk's JSON-RPC client for ``agent``, from its card."""
    async with httpx.AsyncClient(timeout=30.0,
                                 headers={"A2A-Version": "1.0", **(headers or {})}) as http:
        config = ClientConfig(streaming=streaming, polling=polling, httpx_client=http)
        client = await ClientFactory(config).create_from_url(agent.url)
        try:
            yield client
        finally:
            await client.close()


def user_message(text: str, task: Task | None = None) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task is not None:
        message.task_id, message.context_id = task.id, task.context_id
    return SendMessageRequest(message=message, configuration=SendMessageConfiguration())


async def send(client: Client, text: str, task: Task | None = None) -> Task:
    """A blocking SendMessage; the task as the agent answered it."""
    events = [event async for event in client.send_message(user_message(text, task))]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


def artifact_texts(task: Task) -> list[str]:
    return [part.text for artifact in task.artifacts for part in artifact.parts]


def status_text(task: Task) -> str:
    return "\n".join(part.text for part in task.status.message.parts)


def state_name(task: Task) -> str:
    return str(TaskState.Name(task.status.state))


def task_id_of(event: StreamResponse) -> str:
    if event.HasField("task"):
        return event.task.id
    if event.HasField("status_update"):
        return event.status_update.task_id
    return event.artifact_update.task_id


# --------------------------------------------------------------------- the card


def test_the_card_names_a_jsonrpc_1_0_interface_on_loopback_with_streaming(
        agent: RunningAgent) -> None:
    card = agent.card()
    assert card["name"] == agent.name
    assert {"url": agent.url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}.items() \
        <= card["supportedInterfaces"][0].items()
    assert card["capabilities"]["streaming"] is True
    assert [skill["id"] for skill in card["skills"]] == ["scripted"]
    assert card["provider"]["organization"] == "murmur-door tests"


def test_a_name_given_on_the_command_line_is_the_cards_and_the_answers(
        launch: Launcher, tmp_path: Path) -> None:
    with launch("worker-b", log_dir=tmp_path) as running:
        assert running.card()["name"] == "worker-b"


def test_without_port_the_agent_listens_on_the_port_environment_variable(
        launch: Launcher, tmp_path: Path) -> None:
    command = third_party.node_command if launch is third_party.js_agent \
        else third_party.sdk_command
    port = third_party.free_port()
    env = {**os.environ, "PORT": str(port)}
    with third_party.running_agent(lambda _: command(None, "by-env"), "by-env", env=env,
                                   log_dir=tmp_path, port=port) as running:
        assert running.card()["supportedInterfaces"][0]["url"] == f"http://127.0.0.1:{port}/"


# --------------------------------------------------------------------- behaviours


async def test_a_plain_message_completes_with_what_the_agent_heard(agent: RunningAgent) -> None:
    async with a2a_client(agent) as client:
        task = await send(client, "hello there")
    assert state_name(task) == "TASK_STATE_COMPLETED"
    assert artifact_texts(task) == [f"{agent.name} heard: hello there"]


async def test_a_stream_delivers_three_chunks_as_they_are_produced(agent: RunningAgent) -> None:
    chunks: list[tuple[str, float]] = []
    async with a2a_client(agent, streaming=True) as client:
        async for event in client.send_message(user_message("stream: go")):
            update = event.status_update
            if event.HasField("status_update") and update.status.message.parts:
                if update.status.state == TaskState.TASK_STATE_WORKING:
                    chunks.append((update.status.message.parts[0].text, time.monotonic()))
            task_id = task_id_of(event)
        ended = time.monotonic()
        task = await client.get_task(GetTaskRequest(id=task_id))
    assert [text for text, _ in chunks] == ["chunk 1", "chunk 2", "chunk 3"]
    # Produced 0.4 s apart and 0.4 s before the end: spread out, not all at the end (the
    # bounds leave room for a loaded machine delaying one chunk).
    first, last = chunks[0][1], chunks[-1][1]
    assert last - first >= 0.5, chunks
    assert ended - first >= 0.8, (chunks, ended)
    assert state_name(task) == "TASK_STATE_COMPLETED"
    assert artifact_texts(task) == [f"{agent.name} streamed 3 chunks"]


async def test_input_required_then_the_follow_up_completes_the_same_task(
        agent: RunningAgent) -> None:
    async with a2a_client(agent) as client:
        asked = await send(client, "input: tell me")
        assert state_name(asked) == "TASK_STATE_INPUT_REQUIRED"
        assert status_text(asked) == "say more"
        done = await send(client, "the rest", task=asked)
    assert done.id == asked.id
    assert state_name(done) == "TASK_STATE_COMPLETED"
    assert artifact_texts(done) == [f"{agent.name} got: the rest"]


async def test_cancel_ends_a_slow_task_promptly(agent: RunningAgent) -> None:
    async with a2a_client(agent, polling=True) as client:
        started = await send(client, "slow: 30")
        assert state_name(started) in {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"}
        began = time.monotonic()
        canceled = await client.cancel_task(CancelTaskRequest(id=started.id))
        took = time.monotonic() - began
        stored = await client.get_task(GetTaskRequest(id=started.id))
    assert state_name(canceled) == "TASK_STATE_CANCELED"
    assert state_name(stored) == "TASK_STATE_CANCELED"
    assert took < 5.0, took


async def test_cancel_ends_a_task_waiting_for_input(agent: RunningAgent) -> None:
    async with a2a_client(agent) as client:
        asked = await send(client, "input: wait")
        canceled = await client.cancel_task(CancelTaskRequest(id=asked.id))
    assert state_name(canceled) == "TASK_STATE_CANCELED"


async def test_fail_ends_the_task_failed_with_a_message(agent: RunningAgent) -> None:
    async with a2a_client(agent) as client:
        task = await send(client, "fail: on purpose")
    assert state_name(task) == "TASK_STATE_FAILED"
    assert status_text(task) == f"{agent.name} failed: on purpose"


# --------------------------------------------------------------------- call through a proxy


class FakeProxy(BaseHTTPRequestHandler):
    """A forward proxy stand-in: records each request, checks Basic credentials and
    answers itself (the status and body come from the server's ``answer``)."""

    server: ProxyServer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.server.seen.append({"path": self.path, "headers": dict(self.headers.items()),
                                 "body": json.loads(self.rfile.read(length))})
        if self.headers.get("Proxy-Authorization") != self.server.expected_authorization:
            self.reply(407, {"error": "proxy_auth_required"})
            return
        self.reply(*self.server.answer)

    def reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


class ProxyServer(ThreadingHTTPServer):
    def __init__(self, answer: tuple[int, dict[str, Any]], secret: str) -> None:
        super().__init__(("127.0.0.1", 0), FakeProxy)
        self.answer = answer
        self.seen: list[dict[str, Any]] = []
        self.secret = secret
        credentials = base64.b64encode(f"murmur:{secret}".encode()).decode()
        self.expected_authorization = f"Basic {credentials}"

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@pytest.fixture
def proxy_factory() -> Iterator[Callable[[tuple[int, dict[str, Any]]], ProxyServer]]:
    servers: list[ProxyServer] = []

    def start(answer: tuple[int, dict[str, Any]]) -> ProxyServer:
        server = ProxyServer(answer, secrets.token_hex(8))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def proxied_env(proxy: ProxyServer) -> dict[str, str]:
    """The environment with HTTP_PROXY naming ``proxy`` and its credentials, no NO_PROXY."""
    url = f"http://murmur:{proxy.secret}@127.0.0.1:{proxy.port}"
    env = {k: v for k, v in os.environ.items() if k.lower() not in {"no_proxy", "http_proxy"}}
    return {**env, "HTTP_PROXY": url, "http_proxy": url}


WORKER_ANSWER = {"jsonrpc": "2.0", "id": 1, "result": {"task": {
    "id": "t-1", "contextId": "c-1", "status": {"state": "TASK_STATE_COMPLETED"},
    "artifacts": [{"artifactId": "a-1", "parts": [{"text": "pong from worker"}]}]}}}


async def test_call_sends_a_send_message_through_http_proxy_and_reports_the_answer(
        launch: Launcher, tmp_path: Path,
        proxy_factory: Callable[[tuple[int, dict[str, Any]]], ProxyServer]) -> None:
    proxy = proxy_factory((200, WORKER_ANSWER))
    env = proxied_env(proxy)
    with launch(log_dir=tmp_path, env=env) as running:
        async with a2a_client(running) as client:
            task = await send(client, "call: http://worker.formation.invalid/ ping please")
    assert artifact_texts(task) == [f"{running.name} was told: pong from worker"]
    [request] = proxy.seen
    assert request["path"] == "http://worker.formation.invalid/"  # absolute form
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert headers["host"] == "worker.formation.invalid"
    assert headers["a2a-version"] == "1.0"
    body = request["body"]
    assert body["method"] == "SendMessage"
    assert body["params"]["message"]["role"] == "ROLE_USER"
    assert body["params"]["message"]["parts"] == [{"text": "ping please"}]
    assert body["params"]["message"]["messageId"]


async def test_call_refused_by_the_proxy_reports_status_and_body(
        launch: Launcher, tmp_path: Path,
        proxy_factory: Callable[[tuple[int, dict[str, Any]]], ProxyServer]) -> None:
    refusal = {"error": "formation_refused", "message": "sdk may not call worker"}
    proxy = proxy_factory((403, refusal))
    env = proxied_env(proxy)
    with launch(log_dir=tmp_path, env=env) as running:
        async with a2a_client(running) as client:
            task = await send(client, "call: http://worker.formation.invalid/ hi")
    [text] = artifact_texts(task)
    assert text.startswith(f"{running.name} call refused: 403 ")
    assert json.loads(text.split(" 403 ", 1)[1]) == refusal


async def test_call_without_a_proxy_reaches_a_real_sdk_agent_and_reads_its_artifact(
        launch: Launcher, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k.lower() != "http_proxy"}
    with third_party.sdk_agent("callee", log_dir=tmp_path) as callee, \
            launch(log_dir=tmp_path, env=env) as caller:
        async with a2a_client(caller) as client:
            task = await send(client, f"call: {callee.url} ping")
    assert artifact_texts(task) == [f"{caller.name} was told: callee heard: ping"]


async def test_call_to_an_unreachable_address_fails_the_task(
        launch: Launcher, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k.lower() != "http_proxy"}
    closed = third_party.free_port()
    with launch(log_dir=tmp_path, env=env) as running:
        async with a2a_client(running) as client:
            task = await send(client, f"call: http://127.0.0.1:{closed}/ hi")
    assert state_name(task) == "TASK_STATE_FAILED"
    assert status_text(task).startswith(f"{running.name} call failed: ")


# --------------------------------------------------------------------- stderr logs


async def test_every_request_is_logged_with_all_its_headers(agent: RunningAgent) -> None:
    probe = f"probe-{secrets.token_hex(6)}"
    async with a2a_client(agent, headers={"X-Probe": probe}) as client:
        await send(client, "hello")
    requests = agent.requests()
    card_reads = [r for r in requests if r["path"] == "/.well-known/agent-card.json"]
    posts = [r for r in requests if r["method"] == "POST" and r["path"] == "/"]
    assert card_reads and posts, requests
    headers = dict(map(tuple, posts[-1]["headers"]))
    assert headers["x-probe"] == probe
    assert headers["a2a-version"] == "1.0"
    assert headers["host"] == f"127.0.0.1:{agent.port}"
    assert "content-type" in headers


def test_the_environment_is_logged_by_name_never_by_value(
        launch: Launcher, tmp_path: Path) -> None:
    value = f"value-{secrets.token_hex(8)}"
    with launch(log_dir=tmp_path, env={**os.environ, "THIRD_PARTY_PROBE": value}) as running:
        names = running.environment_names()
        log = running.log()
    assert "THIRD_PARTY_PROBE" in names and "PATH" in names
    assert value not in log
