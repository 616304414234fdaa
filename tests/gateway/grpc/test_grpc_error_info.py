"""Every gRPC error a door sends carries an ErrorInfo, the reason and domain the HTTP+JSON
binding gives for the same error (A2A v1.0.1 section 10; issue 53, item 2: behind an A2A
0.3 upstream, whose errors carry only their code, the gRPC status had none, and
a2a-sdk's gRPC client raised a generic ``A2AClientError``).

In order: an upstream's error of each shape, turned into the gRPC status and the
HTTP+JSON ``google.rpc.Status`` side by side; a gateway member in front of an A2A 0.3
upstream (a2a-sdk's own 0.3 JSON-RPC, and one answering as BeeAI does), and of a 1.0
JSON-RPC and a 1.0 HTTP+JSON upstream, where a2a-sdk's gRPC client maps the errors to
their types; last, a call no DoorAuth decided.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import grpc
import pytest
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.rpc import error_details_pb2, status_pb2

from gateway.a2a.jsonrpc import RpcError, member_busy
from gateway.grpc.status import STATUS_DETAILS_KEY, GrpcStatus, rpc_error_status
from gateway.relay.client import UpstreamError
from gateway.relay.rest_framing import RestFraming
from tests.support.door import BASE_URL
from tests.support.grpc_clients import card_grpc_client
from tests.support.upstream import V03, gateway_member
from tests.support.v03_upstream import gateway_before_v03

pytestmark = pytest.mark.timeout(60)

INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def trailer_status(status: GrpcStatus) -> status_pb2.Status:
    ((key, value),) = status.trailing_metadata
    assert key == STATUS_DETAILS_KEY
    return status_pb2.Status.FromString(value)


def first_error_info(status: status_pb2.Status) -> error_details_pb2.ErrorInfo:
    info = error_details_pb2.ErrorInfo()
    assert status.details, "no details"
    assert status.details[0].Unpack(info), "the first detail is not an ErrorInfo"
    return info


def rest_error(upstream: dict[str, Any]) -> RpcError:
    """An HTTP+JSON upstream's answer, read as the relay reads it."""
    framing = RestFraming("http://upstream.invalid")
    with pytest.raises(UpstreamError) as raised:
        framing.answer(400, json.dumps(upstream).encode(), "coder", "CancelTask")
    return raised.value


# --------------------------------------------------------------------- each shape of error

UPSTREAM_ERRORS: dict[str, dict[str, Any]] = {
    # a2a-sdk 0.3 (BeeAI, strands, crewai): the code alone
    "0.3, data null": {"code": -32002, "message": "Task cannot be canceled", "data": None},
    "0.3, no data": {"code": -32001, "message": "Task not found"},
    "data not typed": {"code": -32004, "message": "nope", "data": ["why", {"a": 1}]},
    "data a string": {"code": -32002, "message": "ended", "data": "the task ended"},
    # a 1.0 upstream: its ErrorInfo, wherever it put it
    "1.0": {"code": -32001, "message": "Task not found", "data": [
        {"@type": INFO, "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org"}]},
    "ErrorInfo second": {"code": -32602, "message": "bad", "data": [
        {"@type": BAD_REQUEST, "fieldViolations": [{"field": "id", "description": "x"}]},
        {"@type": INFO, "reason": "INVALID_PARAMS", "domain": "a2a-protocol.org"}]},
    "metadata not strings": {"code": -32002, "message": "no", "data": [
        {"@type": INFO, "reason": "TASK_NOT_CANCELABLE", "domain": "a2a-protocol.org",
         "metadata": {"attempt": 2, "state": "done"}}]},
    "ErrorInfo without a domain": {"code": -32002, "message": "no", "data": [
        {"@type": INFO, "reason": "TASK_NOT_CANCELABLE"}]},
    "a detail of an unknown type": {"code": -32002, "message": "no", "data": [
        {"@type": "type.googleapis.com/acme.Why", "why": "ended"}]},
    "an unknown code": {"code": -32099, "message": "the agent's own", "data": None},
}


@pytest.mark.parametrize("upstream", list(UPSTREAM_ERRORS.values()), ids=list(UPSTREAM_ERRORS))
def test_grpc_errors_carry_the_error_info_the_rest_binding_gives(
        upstream: dict[str, Any]) -> None:
    error = UpstreamError(upstream)
    status = rpc_error_status(error)
    http, document = error.status_object()
    rest = document["error"]
    sent = trailer_status(status)
    info = first_error_info(sent)
    assert rest["details"][0]["@type"] == INFO
    assert (info.reason, info.domain) == (rest["details"][0]["reason"],
                                          rest["details"][0]["domain"])
    assert info.domain and info.reason
    assert status.code.name == rest["status"]
    assert sent.code == status.code.value[0]
    assert status.message == rest["message"] == upstream["message"]
    assert dict(info.metadata) == rest["details"][0]["metadata"]


def test_a_0_3_upstreams_error_gets_its_codes_row() -> None:
    status = rpc_error_status(UpstreamError(UPSTREAM_ERRORS["0.3, data null"]))
    info = first_error_info(trailer_status(status))
    assert status.code == grpc.StatusCode.FAILED_PRECONDITION
    assert (info.reason, info.domain) == ("TASK_NOT_CANCELABLE", "a2a-protocol.org")
    unknown = rpc_error_status(UpstreamError(UPSTREAM_ERRORS["an unknown code"]))
    assert unknown.code == grpc.StatusCode.INTERNAL
    assert first_error_info(trailer_status(unknown)).reason == "INTERNAL_ERROR"


def test_an_upstreams_own_error_info_and_details_are_kept_and_the_doors_own() -> None:
    sent = trailer_status(rpc_error_status(UpstreamError(UPSTREAM_ERRORS["ErrorInfo second"])))
    assert first_error_info(sent).reason == "INVALID_PARAMS"
    bad = error_details_pb2.BadRequest()
    assert sent.details[1].Unpack(bad) and bad.field_violations[0].field == "id"
    kept = first_error_info(trailer_status(rpc_error_status(
        UpstreamError(UPSTREAM_ERRORS["metadata not strings"]))))
    assert dict(kept.metadata) == {"attempt": "2", "state": "done"}
    busy = trailer_status(rpc_error_status(member_busy(1500)))
    assert (first_error_info(busy).reason, first_error_info(busy).domain) == \
        ("MEMBER_BUSY", "murmur.nexus")
    assert len(busy.details) == 2  # and its RetryInfo
    relayed = rest_error({"error": {"code": 400, "status": "FAILED_PRECONDITION",
                                    "message": "Task cannot be canceled", "details": [
                                        {"@type": INFO, "reason": "TASK_NOT_CANCELABLE",
                                         "domain": "a2a-protocol.org"}]}})
    status = rpc_error_status(relayed)
    assert status.code == grpc.StatusCode.FAILED_PRECONDITION
    assert first_error_info(trailer_status(status)).reason == "TASK_NOT_CANCELABLE"


# --------------------------------------------------------------------- a door over each upstream


def request(text: str) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=message, configuration=SendMessageConfiguration())


async def test_cancelling_an_ended_task_over_grpc_is_typed_whatever_the_upstream() -> None:
    """a2a-sdk's gRPC client maps the door's status to its typed error, whatever the
    upstream speaks (A2A 0.3 JSON-RPC, 1.0 JSON-RPC, 1.0 HTTP+JSON); the ErrorInfo is
    the one the HTTP+JSON binding gives."""
    for binding in (V03, "JSONRPC", "HTTP+JSON"):
        async with gateway_member(binding=binding) as formation:
            formation.door.set_url(BASE_URL)
            assert await formation.door.serve_grpc()
            try:
                async with card_grpc_client(formation.door.card, formation.operator) as client:
                    (event,) = [event async for event in client.send_message(request("hello"))]
                    ended = event.task
                    with pytest.raises(TaskNotCancelableError):
                        await client.cancel_task(CancelTaskRequest(id=ended.id))
                    with pytest.raises(TaskNotFoundError):  # forwarded: the upstream's own
                        await client.get_task(GetTaskRequest(id="no-such-task"))
                async with formation.client(formation.operator) as http:
                    rest = (await http.post(f"/tasks/{ended.id}:cancel")).json()["error"]
            finally:
                await formation.door.stop_grpc(0.5)
        assert rest["status"] == "FAILED_PRECONDITION", binding
        assert rest["details"][0]["reason"] == "TASK_NOT_CANCELABLE", binding


async def test_behind_an_upstream_answering_as_beeai_the_errors_are_typed_over_grpc() -> None:
    async with gateway_before_v03(grpc=True) as (formation, upstream, _):
        async with card_grpc_client(formation.door.card, formation.operator) as client:
            (event,) = [event async for event in client.send_message(request("hello"))]
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=event.task.id))
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id="no-such-task"))
    assert upstream.methods == ["message/send", "tasks/cancel", "tasks/get"]


# --------------------------------------------------------------------- the door's own


async def test_a_call_no_doorauth_decided_carries_an_error_info_too() -> None:
    from a2a.types import a2a_pb2_grpc

    from gateway.grpc.binding import GrpcBinding

    async with gateway_member() as formation:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (GrpcBinding(formation.door.tasks.methods).generic_handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await a2a_pb2_grpc.A2AServiceStub(channel).ListTasks(
                        ListTasksRequest(), metadata=[("a2a-version", "1.0")])
        finally:
            await server.stop(0)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    (value,) = [value for key, value in refused.value.trailing_metadata() or ()
                if key == STATUS_DETAILS_KEY]
    info = first_error_info(status_pb2.Status.FromString(value))
    assert (info.reason, info.domain) == ("UNAUTHENTICATED", "murmur.nexus")
