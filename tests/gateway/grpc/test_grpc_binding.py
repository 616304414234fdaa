"""The door's gRPC binding on a real loopback port, with real clients:

1. a2a-sdk's client with ``supported_protocol_bindings=["GRPC"]``, from the door's card,
   with each kind of credential: send, stream, get, list, cancel and subscribe;
2. DoorAuth's attacks through gRPC metadata, each with its status and ErrorInfo reason,
   refused before the request message is read: no credential, a forged token, another
   door's token, a method outside the credential's scopes, a formation token on every
   push method; and the bounds along an edge (a version 2 roster) on gRPC too;
3. what the binding itself judges: the A2A version, the methods this door does not
   serve, an unknown task, a message past the door's size.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
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
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf import json_format

from gateway.auth.edge_limits import DoorBounds, EdgeLimits
from gateway.caller import PUSH_METHODS
from tests.support.auth import CI_TOKEN, mint
from tests.support.grpc_clients import BearerToken, error_info
from tests.support.rest_clients import CALLEE, PEER, WHO, ServedDoor, served_door

pytestmark = pytest.mark.timeout(60)

COMPLETED = TaskState.TASK_STATE_COMPLETED
VERSION = ("a2a-version", "1.0")
EXPECTED_ARTIFACTS = [["part one ", "part two"], ["echo: hello"]]


@pytest.fixture
async def served() -> AsyncIterator[ServedDoor]:
    async with served_door(grpc=True) as door:
        yield door


@asynccontextmanager
async def grpc_client(served: ServedDoor, who: str, *,
                      streaming: bool = False) -> AsyncIterator[Client]:
    """a2a-sdk's gRPC client, made from the door's own card; the token added by
    a2a-sdk's AuthInterceptor for the card's ``bearer`` scheme."""
    config = ClientConfig(streaming=streaming, supported_protocol_bindings=["GRPC"],
                          grpc_channel_factory=grpc.aio.insecure_channel)
    card = a2a_pb2.AgentCard()
    json_format.ParseDict(served.door.card, card, ignore_unknown_fields=True)
    client = ClientFactory(config).create(
        card, interceptors=[AuthInterceptor(BearerToken(served.tokens[who]))])
    try:
        yield client
    finally:
        await client.close()


@asynccontextmanager
async def stub(served: ServedDoor) -> AsyncIterator[a2a_pb2_grpc.A2AServiceStub]:
    async with grpc.aio.insecure_channel(served.grpc_url) as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)


def request(text: str, *, task_id: str = "", return_immediately: bool = False
            ) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task_id:
        message.task_id = task_id
    return SendMessageRequest(
        message=message,
        configuration=SendMessageConfiguration(return_immediately=return_immediately))


def metadata(token: str | None) -> list[tuple[str, str]]:
    pairs = [VERSION]
    if token is not None:
        pairs.append(("authorization", f"Bearer {token}"))
    return pairs


# --------------------------------------------------------------------- 1. a2a-sdk over gRPC


def test_the_card_lists_the_grpc_interface_at_its_own_address(served: ServedDoor) -> None:
    interfaces = served.door.card["supportedInterfaces"]
    assert [i["protocolBinding"] for i in interfaces] == ["JSONRPC", "HTTP+JSON", "GRPC"]
    assert interfaces[2] == {"url": served.grpc_url, "protocolBinding": "GRPC",
                             "protocolVersion": "1.0"}
    assert served.grpc_url.startswith("127.0.0.1:")


@pytest.mark.parametrize("who", WHO)
async def test_a2a_sdk_sends_gets_and_lists_over_grpc(served: ServedDoor, who: str) -> None:
    async with grpc_client(served, who) as client:
        (event,) = [event async for event in client.send_message(request("hello"))]
        task = event.task
        fetched = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        listed = await client.list_tasks(ListTasksRequest(include_artifacts=True))
    assert task.status.state == COMPLETED
    assert [[p.text for p in a.parts] for a in task.artifacts] == EXPECTED_ARTIFACTS
    assert fetched.id == task.id and fetched.status.state == COMPLETED
    assert len(fetched.history) == 1
    assert [t.id for t in listed.tasks] == [task.id]
    assert listed.tasks[0].artifacts, "includeArtifacts reached the door"
    assert served.recorder.hits == [], "nothing went over HTTP"


async def test_a2a_sdk_streams_a_task_over_grpc(served: ServedDoor) -> None:
    async with grpc_client(served, "operator", streaming=True) as client:
        events = [event async for event in client.send_message(request("stream me"))]
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds[0] == "task"
    assert "status_update" in kinds and "artifact_update" in kinds
    assert events[-1].status_update.status.state == COMPLETED


async def test_a2a_sdk_cancels_and_subscribes_over_grpc(served: ServedDoor) -> None:
    async with grpc_client(served, "bearer") as client, \
            grpc_client(served, "bearer", streaming=True) as streaming:
        (held,) = [e async for e in client.send_message(request("hold:a",
                                                                return_immediately=True))]
        (other,) = [e async for e in client.send_message(request("hold:b",
                                                                 return_immediately=True))]

        async def follow() -> list[Any]:
            return [event async for event in streaming.subscribe(
                SubscribeToTaskRequest(id=other.task.id))]

        following = asyncio.create_task(follow())
        await asyncio.sleep(0.2)
        canceled = await client.cancel_task(CancelTaskRequest(id=held.task.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=held.task.id))
        served.agent.release("b")
        followed = await asyncio.wait_for(following, 10)
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert followed[0].WhichOneof("payload") == "task"
    assert followed[-1].status_update.status.state == COMPLETED


# --------------------------------------------------------------------- 2. DoorAuth through metadata


async def test_no_credential_is_unauthenticated(served: ServedDoor) -> None:
    async with stub(served) as door:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await door.GetTask(GetTaskRequest(id="t"), metadata=metadata(None))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error_info(refused.value).reason == "UNAUTHENTICATED"
    assert "Authorization: Bearer" in (refused.value.details() or "")


@pytest.mark.parametrize("token", [
    "mft1.forged.token", "mft1." + "A" * 40, "not-a-token-at-all",
    mint(caller=PEER, callee=CALLEE)[:-4] + "AAAA",
])
async def test_a_forged_token_is_unauthenticated(served: ServedDoor, token: str) -> None:
    async with stub(served) as door:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await door.ListTasks(ListTasksRequest(), metadata=metadata(token))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error_info(refused.value).reason == "INVALID_TOKEN"
    assert token not in (refused.value.details() or ""), "a token is never echoed"


async def test_another_doors_formation_token_is_permission_denied(served: ServedDoor) -> None:
    token = mint(caller=PEER, callee="reviewer")
    async with stub(served) as door:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await door.SendMessage(request("hi"), metadata=metadata(token))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    info = error_info(refused.value)
    assert info.reason == "NOT_PERMITTED" and info.metadata["member"] == PEER
    assert served.door.store.state_counts().get("TASK_STATE_SUBMITTED", 0) == 0


async def test_a_method_outside_the_scopes_is_permission_denied(served: ServedDoor) -> None:
    token = mint(caller=PEER, callee=CALLEE)      # five scopes: no streaming send
    async with stub(served) as door:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in door.SendStreamingMessage(request("hi"), metadata=metadata(token)):
                pass
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    info = error_info(refused.value)
    assert info.reason == "INSUFFICIENT_SCOPE"
    assert info.metadata["method"] == "SendStreamingMessage"
    assert served.door.held == 0, "nothing was started"


@pytest.mark.parametrize("method", sorted(PUSH_METHODS))
async def test_a_formation_token_is_refused_on_every_push_method(
        served: ServedDoor, method: str) -> None:
    requests = {
        "CreateTaskPushNotificationConfig": a2a_pb2.TaskPushNotificationConfig(task_id="t"),
        "GetTaskPushNotificationConfig": a2a_pb2.GetTaskPushNotificationConfigRequest(
            task_id="t", id="c"),
        "ListTaskPushNotificationConfigs": a2a_pb2.ListTaskPushNotificationConfigsRequest(
            task_id="t"),
        "DeleteTaskPushNotificationConfig": a2a_pb2.DeleteTaskPushNotificationConfigRequest(
            task_id="t", id="c"),
    }
    async with stub(served) as door:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await getattr(door, method)(requests[method],
                                        metadata=metadata(served.tokens["formation"]))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_info(refused.value).reason == "INSUFFICIENT_SCOPE"


async def test_a_refused_call_is_answered_before_its_message_is_read(
        served: ServedDoor) -> None:
    """A request that is no protobuf at all still gets the 401, not a parse error."""
    async with grpc.aio.insecure_channel(served.grpc_url) as channel:
        call = channel.unary_unary("/lf.a2a.v1.A2AService/GetTask",
                                   request_serializer=lambda raw: raw,
                                   response_deserializer=lambda raw: raw)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call(b"\xff\xff\xff garbage", metadata=metadata(None))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_the_edge_limits_hold_on_grpc() -> None:
    bounds = DoorBounds(incoming={PEER: EdgeLimits(calls=1)})
    async with served_door(grpc=True, bounds=bounds) as served, stub(served) as door:
        token = metadata(served.tokens["formation"])
        first = await door.SendMessage(request("one"), metadata=token)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await door.SendMessage(request("two"), metadata=token)
        read = await door.GetTask(GetTaskRequest(id=first.task.id), metadata=token)
    assert first.task.status.state == COMPLETED
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_info(refused.value).reason == "LIMIT_REACHED"
    assert read.id == first.task.id, "reading is not a call that starts a task"


async def test_a_grpc_call_that_makes_no_task_gives_its_place_on_the_edge_back() -> None:
    """A call the guard let through that then fails (no message to start a task with)
    holds a place on the edge only while it runs: the one call the edge allows is
    still there for the next."""
    bounds = DoorBounds(incoming={PEER: EdgeLimits(calls=1)})
    async with served_door(grpc=True, bounds=bounds) as served, stub(served) as door:
        token = metadata(served.tokens["formation"])
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await door.SendMessage(SendMessageRequest(), metadata=token)
        answered = await door.SendMessage(request("one"), metadata=token)
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert answered.task.status.state == COMPLETED


# --------------------------------------------------------------------- 3. the binding's own checks


async def test_a_call_without_a2a_version_is_refused_as_0_3(served: ServedDoor) -> None:
    async with stub(served) as door:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await door.GetTask(GetTaskRequest(id="t"), metadata=[
                ("authorization", f"Bearer {served.tokens['operator']}")])
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info = error_info(refused.value)
    assert info.reason == "VERSION_NOT_SUPPORTED" and info.domain == "a2a-protocol.org"


async def test_an_unknown_task_is_not_found_with_its_error_info(served: ServedDoor) -> None:
    async with stub(served) as door:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await door.GetTask(GetTaskRequest(id="missing"), metadata=metadata(CI_TOKEN))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(refused.value).reason == "TASK_NOT_FOUND"


async def test_a_message_past_the_doors_size_is_resource_exhausted(served: ServedDoor) -> None:
    big = request("x" * (served.door.policy.max_body + 10))
    async with stub(served) as door:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await door.SendMessage(big, metadata=metadata(CI_TOKEN))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert served.door.held == 0


async def test_without_the_grpc_extra_the_card_lists_no_grpc(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.grpc

    monkeypatch.setattr(gateway.grpc, "available", lambda: False)
    async with served_door(grpc=True) as served:
        interfaces = served.door.card["supportedInterfaces"]
    assert served.grpc_url == ""
    assert [i["protocolBinding"] for i in interfaces] == ["JSONRPC", "HTTP+JSON"]


async def test_a_server_without_doorauths_interceptor_serves_nothing(served: ServedDoor) -> None:
    """Fail closed: a method reached without the interceptor's decision refuses."""
    from gateway.grpc.binding import GrpcBinding

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (GrpcBinding(served.door.tasks.methods).generic_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(
                    ListTasksRequest(), metadata=metadata(served.tokens["operator"]))
    finally:
        await server.stop(0)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_the_extended_card_over_grpc_for_an_authenticated_caller_only() -> None:
    from gateway.auth.credentials import OperatorToken
    from gateway.auth.door_auth import AuthPolicy
    from gateway.door.app import DoorSettings, build_door
    from gateway.door.card import Skill
    from gateway.door.tasks import TaskRun
    from tests.support.door import card_info

    async def echo(run: TaskRun) -> str:
        return run.text

    operator = OperatorToken.generate()
    secret = (Skill("audit", "Audit", "for signed-in callers"),)
    door = build_door(echo, DoorSettings(card=card_info(extended_skills=secret)),
                      policy=AuthPolicy(authenticated=True, operator=operator))
    grpc_url = await door.serve_grpc()
    assert grpc_url is not None
    try:
        async with grpc.aio.insecure_channel(grpc_url) as channel:
            service = a2a_pb2_grpc.A2AServiceStub(channel)
            card = await service.GetExtendedAgentCard(
                a2a_pb2.GetExtendedAgentCardRequest(), metadata=metadata(operator.value))
            with pytest.raises(grpc.aio.AioRpcError) as anonymous:
                await service.GetExtendedAgentCard(a2a_pb2.GetExtendedAgentCardRequest(),
                                                   metadata=metadata(None))
    finally:
        await door.stop_grpc(0.5)
    assert card.capabilities.extended_agent_card is True
    assert [skill.id for skill in card.skills] == ["code", "audit"]
    assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_part_of_a_media_type_the_card_does_not_take_is_refused(
        served: ServedDoor) -> None:
    png = SendMessageRequest(message=Message(
        message_id="m-png", role=Role.ROLE_USER,
        parts=[Part(text="look"), Part(raw=b"\x89PNG", media_type="image/png")]))
    async with stub(served) as door:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await door.SendMessage(png, metadata=metadata(CI_TOKEN))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(refused.value).reason == "CONTENT_TYPE_NOT_SUPPORTED"
    assert "image/png" in (refused.value.details() or "")
    assert served.door.held == 0, "nothing was started"
