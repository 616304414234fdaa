"""A relayed stream begins with the Task (A2A v1.0.1 section 3.1.2; issue 53, item 3: an
A2A 0.3 upstream such as BeeAI begins ``message/stream`` with a ``submitted`` status
update, and the door passed it through as the stream's first event).

In order: :func:`gateway.relay.opening.opening_task` alone (what the Task is made of,
and when none is made); the fan-out's first subscriber; then a gateway member in front of
an upstream answering as BeeAI does (tests/support/v03_upstream.py), each stream on each
binding: ``SendStreamingMessage`` and ``SubscribeToTask`` over JSON-RPC, HTTP+JSON and
gRPC begin with the Task, then every event of the upstream's (and a 1.0 upstream's
stream, which begins with its own Task, gets no second one).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format

from gateway.protocol import TaskState
from gateway.relay.fanout import Fanout
from gateway.relay.known import KnownTask
from gateway.relay.opening import opening_task
from tests.support.door import rpc, send_params
from tests.support.upstream import GatewayFormation, gateway_member
from tests.support.v03_upstream import V03Upstream, gateway_before_v03

pytestmark = pytest.mark.timeout(60)

BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]
WAIT_S = 10.0


def status_update(state: str, task_id: str = "t1") -> dict[str, Any]:
    return {"statusUpdate": {"taskId": task_id, "contextId": "c1",
                             "status": {"state": state, "timestamp": "2026-01-01T00:00:00Z"}}}


def known(state: str = TaskState.WORKING, snapshot: dict[str, Any] | None = None) -> KnownTask:
    return KnownTask("t1", "operator", "c1", state, 0, snapshot=snapshot)


# --------------------------------------------------------------------- opening_task alone


def test_a_first_status_update_gets_the_task_made_of_it_and_the_message() -> None:
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    first = status_update("TASK_STATE_SUBMITTED")
    made = opening_task(first, lambda _: None, message=message)
    assert made == {"task": {
        "id": "t1", "contextId": "c1", "status": first["statusUpdate"]["status"],
        "history": [{**message, "taskId": "t1", "contextId": "c1"}]}}
    assert "taskId" not in message, "the caller's message is not changed"
    assert "history" not in opening_task(first, lambda _: None, message=message,
                                         history_length=0)["task"]  # type: ignore[index]


def test_a_task_a_message_or_an_update_naming_no_task_gets_none() -> None:
    for first in ({"task": {"id": "t1"}}, {"message": {"messageId": "m"}},
                  {"statusUpdate": {"status": {}}}, {"artifactUpdate": "x"}, "junk", None):
        assert opening_task(first, lambda _: known()) is None, first


def test_an_artifact_first_takes_the_status_and_history_the_door_saw() -> None:
    seen = {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"},
            "history": [{"messageId": "m0"}], "artifacts": [{"artifactId": "a0"}]}
    first = {"artifactUpdate": {"taskId": "t1", "contextId": "c1",
                                "artifact": {"artifactId": "a1", "parts": []}}}
    made = opening_task(first, lambda _: known(snapshot=seen))
    assert made == {"task": {"id": "t1", "contextId": "c1",
                             "status": {"state": "TASK_STATE_WORKING"},
                             "history": [{"messageId": "m0"}],
                             "artifacts": [{"artifactId": "a0"}]}}
    bare = opening_task(first, lambda _: known(TaskState.SUBMITTED))
    assert bare == {"task": {"id": "t1", "contextId": "c1",
                             "status": {"state": "TASK_STATE_SUBMITTED"}}}
    other = opening_task(first, lambda _: None, seen={**seen, "id": "another"})
    assert other is not None and "history" not in other["task"], "another task's Task"


# --------------------------------------------------------------------- the fan-out


class Upstream:
    """An upstream subscription that yields ``events`` then ends."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[Any]:
        for event in self.events:
            await asyncio.sleep(0)
            yield event


async def test_the_first_subscriber_gets_the_task_before_the_upstreams_first_event() -> None:
    events = [status_update("TASK_STATE_WORKING"), status_update("TASK_STATE_COMPLETED")]
    observed: list[Any] = []
    fanout = Fanout(Upstream(events).__aiter__(), on_event=observed.append,
                    on_close=lambda _: None)
    got = [event async for event in fanout.join(
        opening=lambda event: opening_task(event, lambda _: known()))]
    assert [next(iter(event)) for event in got] == ["task", "statusUpdate", "statusUpdate"]
    assert got[0]["task"]["status"] == events[0]["statusUpdate"]["status"]
    assert got[1:] == events
    assert observed == events, "the Task made for the caller is never observed"


# --------------------------------------------------------------------- a door before a 0.3 upstream


def envelope(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def sse_data(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


async def streamed(formation: GatewayFormation, address: str, binding: str, method: str,
                   params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every event of one stream of ``method`` on ``binding``, as 1.0 StreamResponses."""
    if binding == "GRPC":
        request: Any = (json_format.ParseDict(params, a2a_pb2.SendMessageRequest())
                        if method == "SendStreamingMessage"
                        else a2a_pb2.SubscribeToTaskRequest(id=params["id"]))
        async with grpc.aio.insecure_channel(address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            call = getattr(stub, method)(request, metadata=[
                ("a2a-version", "1.0"), ("authorization", f"Bearer {formation.operator}")])
            return [json_format.MessageToDict(event) async for event in call]
    async with formation.client(formation.operator) as client:
        if binding == "JSONRPC":
            response = await client.post("/", json=envelope(method, params))
            return [document["result"] for document in sse_data(response.text)]
        path = ("/message:stream" if method == "SendStreamingMessage"
                else f"/tasks/{params['id']}:subscribe")
        response = await client.post(path, json=params)
        assert response.status_code == 200, response.text
        return sse_data(response.text)


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [next(iter(event)) for event in events]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_send_stream_begins_with_one_task_whatever_the_upstream(binding: str) -> None:
    """The 0.3 upstream's stream gets the Task made of its first event; a 1.0 upstream's,
    which begins with its own, gets no second."""
    params = send_params("stream this")
    async with gateway_before_v03(grpc=binding == "GRPC") as (formation, upstream, address):
        events = await streamed(formation, address, binding, "SendStreamingMessage", params)
    assert kinds(events)[:2] == ["task", "statusUpdate"], kinds(events)
    assert kinds(events).count("task") == 1
    task, first = events[0]["task"], events[1]["statusUpdate"]
    assert (task["id"], task["contextId"]) == (first["taskId"], first["contextId"])
    assert task["status"]["state"] == first["status"]["state"] == "TASK_STATE_SUBMITTED"
    (sent,) = task["history"]
    assert sent["messageId"] == params["message"]["messageId"]
    assert sent["parts"] == [{"text": "stream this"}] and sent["taskId"] == task["id"]
    states = [e["statusUpdate"]["status"]["state"] for e in events if "statusUpdate" in e]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert "artifactUpdate" in kinds(events)
    assert upstream.methods[0] == "message/stream"  # (then maybe the door's follower)
    if binding != "GRPC":  # (the gRPC binding serves the same methods' events)
        async with gateway_member() as one_dot_zero:
            events = await streamed(one_dot_zero, "", binding, "SendStreamingMessage",
                                    send_params("stream: go"))
        assert kinds(events)[0] == "task" and kinds(events).count("task") == 1, kinds(events)


async def live_task(formation: GatewayFormation, upstream: V03Upstream) -> str:
    async with formation.client(formation.operator) as client:
        sent = await rpc(client, "SendMessage", send_params("slow: 0.5", immediately=True))
    task_id: str = sent["result"]["task"]["id"]
    async with asyncio.timeout(WAIT_S):
        while upstream.tasks[task_id].state == "submitted":
            await asyncio.sleep(0.01)
    return task_id


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_0_3_upstreams_subscription_begins_with_the_task(binding: str) -> None:
    async with gateway_before_v03(grpc=binding == "GRPC") as (formation, upstream, address):
        task_id = await live_task(formation, upstream)
        events = await streamed(formation, address, binding, "SubscribeToTask", {"id": task_id})
    assert kinds(events)[0] == "task", kinds(events)
    assert kinds(events).count("task") == 1
    task = events[0]["task"]
    assert task["id"] == task_id and task["status"]["state"] == "TASK_STATE_WORKING"
    assert [m["parts"] for m in task["history"]] == [[{"text": "slow: 0.5"}]], \
        "the history as the door read it"
    assert kinds(events)[1:] == ["artifactUpdate", "statusUpdate"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert upstream.methods.count("tasks/resubscribe") == 1


async def test_a_history_length_of_zero_leaves_the_made_task_without_history() -> None:
    params = {**send_params("stream this"), "configuration": {"historyLength": 0}}
    async with gateway_before_v03() as (formation, _, address):
        events = await streamed(formation, address, "JSONRPC", "SendStreamingMessage", params)
    assert kinds(events)[0] == "task" and "history" not in events[0]["task"]
