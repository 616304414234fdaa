"""a2a-sdk's gRPC client end to end, against the gRPC binding of real member processes.

Three doors, started once for the module:

* ``solo``: a plain standalone door, ``mur run --capsule`` of a python agent whose tasks
  the test holds and lets go (``hold:<key>`` waits, boundedly, for ``release:<key>``);
* ``worker``: the same agent as a non-entry member of a real ``mur run --roster``
  formation, called as its operator (the token in its records' ``operator.token``);
* ``sdkbot``: a gateway member (``agent.a2a``) of that formation in front of the
  third-party a2a-sdk agent (``tests/agents/sdk_agent.py``), which speaks JSON-RPC only:
  its door offers gRPC all the same.

In order, for each door: the member runs this checkout's code; the card lists GRPC at
the address the process reported (the readiness line, every row of the formation line);
a2a-sdk's client (``supported_protocol_bindings=["GRPC"]``, the token added by its
AuthInterceptor for the card's ``bearer`` scheme, made from the door's own card) sends
(blocking) then gets and lists, the same task read over JSON-RPC too; input-required then
the reply on the same task; pages of ListTasks; a streaming send (SendStreamingMessage);
cancel of a held task and the errors after it; SubscribeToTask on a live task until its
end; an ended task neither followed nor canceled, with the gRPC status HTTP+JSON names
(at the gateway member too: an upstream's error travels by its code); a stream the client
drops; then DoorAuth's refusals through gRPC metadata (no credential, a wrong token, the
right token in the wrong scheme), nothing started by a refused send; and last the
session's trace, which records the task sent over gRPC with the caller's ``traceparent``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import (
    AuthInterceptor,
    Client,
    ClientConfig,
    ClientFactory,
)
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format

from tests.support.calls import Formation
from tests.support.formation import install_capsule, write_capsule, write_roster
from tests.support.gateway_capsules import sdk_capsule
from tests.support.grpc_clients import BearerToken, error_info
from tests.support.member import ROOT, Member, Project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
LIVE = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
#: Every wait on a door is bounded by this many seconds.
WAIT_S = 20.0
DOORS = ["solo", "worker", "sdkbot"]

#: The python agent of ``solo`` and ``worker`` (``{name}`` is its member's name). Its
#: texts mirror the a2a-sdk agent's where both have them (an answer "<name> heard: ...",
#: ``stream:`` three "chunk N" statuses, ``input:`` asks "say more"), plus a hold the test
#: controls: ``hold:<key>`` waits for ``release:<key>`` (another task of the same agent
#: process), at most 30 s; and ``where``, the file its runtime's ``launcher`` came from.
AGENT = '''
import asyncio
import sys

NAME = "{name}"
EVENTS = {{}}


def event(key):
    return EVENTS.setdefault(key, asyncio.Event())


async def run(task):
    text = task.text
    if text.startswith("hold:"):
        key = text[len("hold:"):]
        await asyncio.wait_for(event(key).wait(), 30)
        return f"released {{key}}"
    if text.startswith("release:"):
        event(text[len("release:"):]).set()
        return "let go"
    if text.startswith("input:"):
        more = await task.input_required("say more")
        return f"{{NAME}} got: {{more}}"
    if text == "where":
        return sys.modules["launcher"].__file__
    if text.startswith("stream:"):
        for number in (1, 2, 3):
            await task.status(f"chunk {{number}}")
            await asyncio.sleep(0.05)
        return f"{{NAME}} streamed 3 chunks"
    return f"{{NAME}} heard: {{text}}"
'''
#: The formation's entry member: it calls nobody here, it only has to be there.
ENTRY_AGENT = '''
async def run(task):
    return f"planner: {task.text}"
'''
LIFECYCLE = "concurrency: 4\nqueue_depth: 4"


# --------------------------------------------------------------------- the module's doors


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Member]:
    """``mur run --capsule local/solo`` (operator token only), in a MURMUR_HOME of its own."""
    root = tmp_path_factory.mktemp("grpc-solo")
    home = root / "home"
    home.mkdir(mode=0o700)
    project = Project(path=root / "project", home=home)
    project.path.mkdir()
    try:
        project.capsule("solo", agent=AGENT.format(name="solo"), lifecycle=LIFECYCLE)
        yield project.run("solo")
    finally:
        project.cleanup()


@pytest.fixture(scope="module")
def formation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Formation]:
    """``mur run --roster --json``: planner (entry) may call worker and sdkbot."""
    root = tmp_path_factory.mktemp("grpc-formation")
    home = root / "home"
    home.mkdir(mode=0o700)
    project = root / "project"
    project.mkdir()
    for source in (
            write_capsule(root, "planner", ENTRY_AGENT, allow_localhost=True),
            write_capsule(root, "worker", AGENT.format(name="worker"), accept_peers=True,
                          lifecycle="{concurrency: 4, queue_depth: 4}"),
            sdk_capsule(root, "sdkbot")):
        install_capsule(project, source)
    write_roster(project, [("planner", True), ("worker", False), ("sdkbot", False)],
                 {"planner": ["worker", "sdkbot"]})
    running = Formation.launch(project, home)
    try:
        yield running
    finally:
        running.stop()


@dataclass
class Door:
    """One door under test: what its process reported, its card, its operator token."""

    name: str
    pid: int
    http_url: str
    reported_grpc_url: str
    token: str = field(repr=False)
    card: dict[str, Any] = field(repr=False)
    trace: Callable[[], list[dict[str, Any]]] = field(repr=False)
    #: A gateway member: the a2a-sdk agent answers, and its tasks cannot be held by us.
    gateway: bool = False

    @property
    def grpc_url(self) -> str:
        (interface,) = [i for i in self.card["supportedInterfaces"]
                        if i["protocolBinding"] == "GRPC"]
        return str(interface["url"])

    def heard(self, text: str) -> str:
        return f"{self.name} heard: {text}"

    def held(self, key: str) -> str:
        """A task text that keeps the task working until canceled (or released)."""
        return "slow: 30" if self.gateway else f"hold:{key}"


def read_card(door_url: str, token: str) -> dict[str, Any]:
    response = httpx.get(door_url + "/.well-known/agent-card.json", timeout=10.0,
                         trust_env=False, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.status_code
    card: dict[str, Any] = response.json()
    return card


def solo_door(member: Member) -> Door:
    return Door("solo", member.pid, member.door, str(member.ready.get("grpc_url")),
                member.token, read_card(member.door, member.token), member.trace)


def formation_door(running: Formation, name: str) -> Door:
    (row,) = [m for m in running.line["members"] if m["name"] == name]
    token = running.operator_token(name)
    return Door(name, int(row["pid"]), str(row["door_url"]), str(row["grpc_url"]), token,
                read_card(row["door_url"], token), lambda: running.trace(name),
                gateway=name == "sdkbot")


@pytest.fixture(params=DOORS)
def door(request: pytest.FixtureRequest) -> Door:
    if request.param == "solo":
        return solo_door(request.getfixturevalue("solo"))
    return formation_door(request.getfixturevalue("formation"), request.param)


# --------------------------------------------------------------------- clients, helpers


def loopback_channel(target: str) -> grpc.aio.Channel:
    """An insecure channel that never goes through an HTTP proxy of the environment."""
    return grpc.aio.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)])


@asynccontextmanager
async def grpc_client(door: Door, *, streaming: bool = False) -> AsyncIterator[Client]:
    """a2a-sdk's gRPC client, made from the door's own card, as its operator."""
    config = ClientConfig(streaming=streaming, supported_protocol_bindings=["GRPC"],
                          grpc_channel_factory=loopback_channel)
    card = a2a_pb2.AgentCard()
    json_format.ParseDict(door.card, card, ignore_unknown_fields=True)
    client = ClientFactory(config).create(
        card, interceptors=[AuthInterceptor(BearerToken(door.token))])
    try:
        yield client
    finally:
        await client.close()


@asynccontextmanager
async def stub(door: Door) -> AsyncIterator[a2a_pb2_grpc.A2AServiceStub]:
    """The A2A service's plain stub, for metadata the test writes itself."""
    async with loopback_channel(door.grpc_url) as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


def request(text: str, *, context_id: str = "", return_immediately: bool = False
            ) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id:
        message.context_id = context_id
    return SendMessageRequest(
        message=message,
        configuration=SendMessageConfiguration(return_immediately=return_immediately))


async def one_task(client: Client, sent: SendMessageRequest) -> Task:
    events = [event async for event in client.send_message(sent)]
    assert len(events) == 1 and events[0].HasField("task"), events
    return events[0].task


def texts(task: Task) -> list[str]:
    return [part.text for artifact in task.artifacts for part in artifact.parts]


def status_texts(events: list[StreamResponse]) -> list[str]:
    return [part.text for event in events if event.HasField("status_update")
            for part in event.status_update.status.message.parts]


def artifact_texts(events: list[StreamResponse]) -> list[str]:
    return [part.text for event in events if event.HasField("artifact_update")
            for part in event.artifact_update.artifact.parts]


def metadata(authorization: str | None) -> list[tuple[str, str]]:
    pairs = [("a2a-version", "1.0")]
    if authorization is not None:
        pairs.append(("authorization", authorization))
    return pairs


def jsonrpc(door: Door, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One JSON-RPC call on the door's HTTP URL as its operator."""
    response = httpx.post(door.http_url + "/", timeout=10.0, trust_env=False, json={
        "jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={"Authorization": f"Bearer {door.token}", "A2A-Version": "1.0"})
    document: dict[str, Any] = response.json()
    return document


# --------------------------------------------------------------------- the processes, the card


@pytest.mark.parametrize("door", ["solo", "worker"], indirect=True)
async def test_the_members_run_this_checkouts_code(door: Door) -> None:
    """The member runtime's own modules (its agent process is a fork of it) come from this
    worktree, not from another checkout the interpreter could reach."""
    async with asyncio.timeout(WAIT_S), grpc_client(door) as client:
        task = await one_task(client, request("where"))
    assert texts(task) == [f"{ROOT}/launcher/__init__.py"]


def test_the_card_lists_grpc_at_the_address_the_process_reported(door: Door) -> None:
    interfaces = door.card["supportedInterfaces"]
    assert [i["protocolBinding"] for i in interfaces] == ["JSONRPC", "HTTP+JSON", "GRPC"]
    assert interfaces[2] == {"url": door.reported_grpc_url, "protocolBinding": "GRPC",
                             "protocolVersion": "1.0"}
    assert door.reported_grpc_url.startswith("127.0.0.1:")
    assert door.card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == \
        "Bearer"


def test_every_row_of_the_formation_line_names_its_doors_grpc_address(
        formation: Formation) -> None:
    rows = formation.line["members"]
    for row in rows:
        card = read_card(row["door_url"], formation.operator_token(row["name"]))
        (interface,) = [i for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
        assert interface["url"] == row["grpc_url"], row["name"]
        assert row["grpc_url"].startswith("127.0.0.1:"), row["name"]
    addresses = [row["grpc_url"] for row in rows] + [row["door_url"] for row in rows]
    assert len(set(addresses)) == 2 * len(rows) == 6, "each door has its own gRPC port"


# --------------------------------------------------------------------- a2a-sdk over gRPC


async def test_send_blocking_then_get_and_list(door: Door) -> None:
    context = uuid.uuid4().hex
    async with asyncio.timeout(WAIT_S), grpc_client(door) as client:
        task = await one_task(client, request("hello over grpc", context_id=context))
        fetched = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        listed = await client.list_tasks(ListTasksRequest(context_id=context,
                                                          include_artifacts=True))
    assert task.status.state == COMPLETED
    assert task.context_id == context
    assert texts(task) == [door.heard("hello over grpc")]
    assert fetched.id == task.id and fetched.status.state == COMPLETED
    # the a2a-sdk agent keeps no history (its own GetTask returns none): the gateway's
    # GetTask is the upstream's
    assert len(fetched.history) == (0 if door.gateway else 1)
    assert [t.id for t in listed.tasks] == [task.id]
    assert texts(listed.tasks[0]) == [door.heard("hello over grpc")], \
        "includeArtifacts reached the door"
    over_jsonrpc = jsonrpc(door, "GetTask", {"id": task.id})["result"]
    assert over_jsonrpc["id"] == task.id
    assert over_jsonrpc["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_input_required_then_the_reply_on_the_same_task(door: Door) -> None:
    async with asyncio.timeout(WAIT_S), grpc_client(door) as client:
        asked = await one_task(client, request("input: a question"))
        reply = request("the answer")
        reply.message.task_id, reply.message.context_id = asked.id, asked.context_id
        answered = await one_task(client, reply)
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [p.text for p in asked.status.message.parts] == ["say more"]
    assert (answered.id, answered.context_id) == (asked.id, asked.context_id)
    assert answered.status.state == COMPLETED
    assert texts(answered) == [f"{door.name} got: the answer"]


async def test_list_tasks_pages_of_two_over_three(door: Door) -> None:
    context = uuid.uuid4().hex
    pages: list[list[str]] = []
    async with asyncio.timeout(WAIT_S), grpc_client(door) as client:
        sent = [(await one_task(client, request(f"task {n}", context_id=context))).id
                for n in range(3)]
        token = ""
        while len(pages) < 3:
            page = await client.list_tasks(ListTasksRequest(context_id=context, page_size=2,
                                                            page_token=token))
            assert page.total_size == 3 and page.page_size == 2
            pages.append([task.id for task in page.tasks])
            token = page.next_page_token
            if not token:
                break
    assert [len(page) for page in pages] == [2, 1]
    assert [task_id for page in pages for task_id in page] == list(reversed(sent)), \
        "newest first, each once"


async def test_a_streaming_send_sends_the_task_then_each_update(door: Door) -> None:
    async with asyncio.timeout(WAIT_S), grpc_client(door, streaming=True) as client:
        events = [event async for event in client.send_message(request("stream: go"))]
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds[0] == "task", kinds
    task_id = events[0].task.id
    chunks = [text for text in status_texts(events) if text.startswith("chunk")]
    assert chunks == ["chunk 1", "chunk 2", "chunk 3"], status_texts(events)
    assert artifact_texts(events) == [f"{door.name} streamed 3 chunks"], kinds
    assert events[-1].status_update.status.state == COMPLETED, kinds
    assert {e.status_update.task_id for e in events if e.HasField("status_update")} == \
        {task_id}


async def test_cancel_a_held_task_then_the_errors(door: Door) -> None:
    async with asyncio.timeout(WAIT_S), grpc_client(door) as client:
        held = await one_task(client, request(door.held(uuid.uuid4().hex),
                                              return_immediately=True))
        assert held.status.state in LIVE
        canceled = await client.cancel_task(CancelTaskRequest(id=held.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=held.id))
        fetched = await client.get_task(GetTaskRequest(id=held.id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(CancelTaskRequest(id="no-such-task"))
    assert canceled.id == held.id and canceled.status.state == CANCELED
    assert fetched.status.state == CANCELED


async def test_subscribe_follows_a_live_task_to_its_end(door: Door) -> None:
    """The subscription starts on a working task; for our agent the test lets the task go
    once the subscription has its first event (for the a2a-sdk agent, ``stream:`` ends by
    itself after three chunks 0.4 s apart)."""
    key = uuid.uuid4().hex
    text = "stream: follow me" if door.gateway else f"hold:{key}"
    received: list[StreamResponse] = []
    async with asyncio.timeout(WAIT_S), grpc_client(door) as client, \
            grpc_client(door, streaming=True) as streaming:
        task = await one_task(client, request(text, return_immediately=True))
        async for event in streaming.subscribe(SubscribeToTaskRequest(id=task.id)):
            received.append(event)
            if len(received) == 1 and not door.gateway:
                released = await one_task(client, request(f"release:{key}"))
                assert texts(released) == ["let go"]
        final = await client.get_task(GetTaskRequest(id=task.id))
    assert received[0].WhichOneof("payload") == "task"
    assert received[0].task.id == task.id and received[0].task.status.state in LIVE
    expected = f"{door.name} streamed 3 chunks" if door.gateway else f"released {key}"
    assert artifact_texts(received) == [expected]
    assert received[-1].status_update.status.state == COMPLETED
    assert final.status.state == COMPLETED and texts(final) == [expected]


async def test_an_ended_task_can_be_neither_followed_nor_canceled(door: Door) -> None:
    async with asyncio.timeout(WAIT_S), grpc_client(door) as client, \
            grpc_client(door, streaming=True) as streaming:
        ended = await one_task(client, request("already done"))
        with pytest.raises(UnsupportedOperationError):
            async for _ in streaming.subscribe(SubscribeToTaskRequest(id=ended.id)):
                pass
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=ended.id))
    assert ended.status.state == COMPLETED


@pytest.mark.parametrize("door", ["solo", "worker", "sdkbot"], indirect=True)
async def test_an_ended_tasks_errors_have_the_grpc_status_rest_names(door: Door) -> None:
    """The same error on two bindings: the gRPC status is the ``status`` of the
    HTTP+JSON binding's ``google.rpc.Status`` (A2A 1.0 section 5.4), and the ErrorInfo
    the same."""
    headers = {"Authorization": f"Bearer {door.token}", "A2A-Version": "1.0"}
    async with asyncio.timeout(WAIT_S), stub(door) as service:
        auth = metadata(f"Bearer {door.token}")
        ended = (await service.SendMessage(request("ended"), metadata=auth, timeout=10)).task
        with pytest.raises(grpc.aio.AioRpcError) as cancel:
            await service.CancelTask(CancelTaskRequest(id=ended.id), metadata=auth, timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as subscribe:
            async for _ in service.SubscribeToTask(SubscribeToTaskRequest(id=ended.id),
                                                   metadata=auth, timeout=10):
                pass
        refused = {"cancel": cancel.value, "subscribe": subscribe.value}
        async with httpx.AsyncClient(base_url=door.http_url, headers=headers, timeout=10.0,
                                     trust_env=False) as http:
            rest = {what: (await http.post(f"/tasks/{ended.id}:{what}")).json()["error"]
                    for what in refused}
    assert ended.status.state == COMPLETED
    assert {what: rest[what]["details"][0]["reason"] for what in rest} == \
        {"cancel": "TASK_NOT_CANCELABLE", "subscribe": "UNSUPPORTED_OPERATION"}
    for what, error in refused.items():
        assert error_info(error).reason == rest[what]["details"][0]["reason"], what
        assert error.code().name == rest[what]["status"], (what, error.code())


async def test_a_stream_the_client_drops_leaves_the_door_serving(door: Door) -> None:
    """The client goes away after the stream's first event; the task runs on and the
    door answers the next call on a new channel."""
    async with asyncio.timeout(WAIT_S):
        async with grpc_client(door, streaming=True) as client:
            async for event in client.send_message(request("stream: dropped")):
                first = event
                break
        async with grpc_client(door) as client:
            while (task := await client.get_task(GetTaskRequest(id=first.task.id))
                   ).status.state in LIVE:
                await asyncio.sleep(0.05)
    assert task.status.state == COMPLETED
    assert texts(task) == [f"{door.name} streamed 3 chunks"]


# --------------------------------------------------------------------- DoorAuth through metadata


@pytest.mark.parametrize(("authorization", "reason"), [
    (None, "UNAUTHENTICATED"),
    ("Bearer not-the-operator-token-0123456789abcdef", "INVALID_TOKEN"),
    ("Bearer mft1.forged.formation-token", "INVALID_TOKEN"),
], ids=["no-credential", "wrong-token", "forged-formation-token"])
async def test_a_refused_credential_is_unauthenticated_and_starts_nothing(
        door: Door, authorization: str | None, reason: str) -> None:
    context = uuid.uuid4().hex
    async with asyncio.timeout(WAIT_S), stub(door) as service:
        with pytest.raises(grpc.aio.AioRpcError) as listing:
            await service.ListTasks(ListTasksRequest(), metadata=metadata(authorization),
                                    timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as sending:
            await service.SendMessage(request("never run", context_id=context),
                                      metadata=metadata(authorization), timeout=10)
    for refused in (listing.value, sending.value):
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
        assert error_info(refused).reason == reason
        if authorization is not None:
            echoed = authorization.split()[1] in (refused.details() or "")
            assert not echoed, "a token is never echoed"
    assert jsonrpc(door, "ListTasks", {"contextId": context})["result"]["tasks"] == []


async def test_the_operator_token_in_the_wrong_scheme_is_refused(door: Door) -> None:
    async with asyncio.timeout(WAIT_S), stub(door) as service:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await service.ListTasks(ListTasksRequest(),
                                    metadata=metadata(f"Basic {door.token}"), timeout=10)
        allowed = await service.ListTasks(ListTasksRequest(page_size=1),
                                          metadata=metadata(f"Bearer {door.token}"),
                                          timeout=10)
    echoed = door.token in (refused.value.details() or "")
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert not echoed, "the token was echoed"
    assert allowed.page_size == 1


# --------------------------------------------------------------------- the session's records


async def test_the_trace_records_the_task_sent_over_grpc_with_its_traceparent(
        door: Door) -> None:
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    async with asyncio.timeout(WAIT_S), stub(door) as service:
        sent = await service.SendMessage(request("traced"), timeout=10, metadata=[
            *metadata(f"Bearer {door.token}"), ("traceparent", f"00-{trace_id}-{span_id}-01")])
        task_id = sent.task.id
        while True:
            records = [r for r in door.trace() if r.get("task_id") == task_id]
            states = [r["state"] for r in records if r["event"] == "task_state"]
            if "TASK_STATE_COMPLETED" in states:
                break
            await asyncio.sleep(0.05)
    (received,) = [r for r in records if r["event"] == "a2a_task_received"]
    assert received["credential"] == "operator"
    assert (received["trace_id"], received["parent_span_id"]) == (trace_id, span_id)
    assert sent.task.status.state == COMPLETED
