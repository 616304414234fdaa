"""A gateway member whose upstream speaks only A2A 0.3 (a 0.3 card: top-level ``url``,
``preferredTransport``, ``protocolVersion`` 0.3.0; a2a-sdk's 0.3 JSON-RPC): the door
speaks 0.3 to it (gateway/relay/v03_framing.py) and A2A 1.0 to its callers on every
binding, with every guarantee of the relay: ownership per caller, ListTasks from the
door's own records, streams, history, cancel, errors passed through (docs/a2a-0.3.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from gateway.relay.interfaces import UpstreamInterface, upstream_interface
from tests.support.door import BASE_URL, rpc, send_params
from tests.support.upstream import V03, GatewayFormation, gateway_member

WAIT_S = 10.0
TERMINAL = ("TASK_STATE_COMPLETED", "TASK_STATE_CANCELED", "TASK_STATE_FAILED",
            "TASK_STATE_INPUT_REQUIRED")
V03_NAMES = {"message/send", "message/stream", "tasks/get", "tasks/cancel",
             "tasks/resubscribe"}


async def finished(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        while True:
            task: dict[str, Any] = (await rpc(client, "GetTask", {"id": task_id}))["result"]
            if task["status"]["state"] in TERMINAL:
                return task
            await asyncio.sleep(0.05)


def sse_results(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:])["result"] for line in text.splitlines()
            if line.startswith("data:")]


def only_0_3_reached_the_upstream(formation: GatewayFormation) -> None:
    methods = set(formation.recorder.rpc_methods())
    assert methods and methods <= V03_NAMES, methods
    versions = {value for request in formation.recorder.rpc()
                for value in request.header("A2A-Version")}
    assert versions == {"0.3"}


def test_a_0_3_card_is_spoken_to_in_0_3_and_a_1_0_interface_is_preferred() -> None:
    card_url = "http://127.0.0.1:9/.well-known/agent-card.json"
    legacy = {"url": "http://localhost:9/a2a", "protocolVersion": "0.3.0",
              "preferredTransport": "JSONRPC"}
    assert upstream_interface(legacy, card_url) == UpstreamInterface(
        "JSONRPC", "0.3", "http://127.0.0.1:9/a2a")
    grpc_first = {"url": "http://127.0.0.1:9/grpc", "preferredTransport": "GRPC",
                  "protocolVersion": "0.3.0",
                  "additionalInterfaces": [{"url": "http://127.0.0.1:9/rpc",
                                            "transport": "JSONRPC"}]}
    assert upstream_interface(grpc_first, card_url).url == "http://127.0.0.1:9/rpc"
    both = {**legacy, "supportedInterfaces": [
        {"url": "http://127.0.0.1:9/v1", "protocolBinding": "JSONRPC",
         "protocolVersion": "1.0"}]}
    assert upstream_interface(both, card_url).version == "1.0"


def test_a_0_3_card_with_only_rest_or_grpc_is_refused_naming_what_it_offers() -> None:
    from gateway.relay.client import UpstreamCardError

    card = {"url": "http://127.0.0.1:9/", "protocolVersion": "0.3.0",
            "preferredTransport": "HTTP+JSON"}
    with pytest.raises(UpstreamCardError, match="offers HTTP\\+JSON 0.3.0.*JSONRPC at "
                       "protocolVersion 0.3"):
        upstream_interface(card, "http://127.0.0.1:9/.well-known/agent-card.json")


async def test_send_message_is_relayed_in_0_3_and_answered_in_1_0() -> None:
    async with gateway_member(binding=V03) as formation:
        async with formation.client(formation.planner) as client:
            body = await rpc(client, "SendMessage", send_params("hello"))
        task = body["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["parts"] == [{"text": "heard: hello"}]
        assert "kind" not in json.dumps(body)
        sent = formation.recorder.rpc("message/send")[0].params
        assert sent["message"]["kind"] == "message" and sent["message"]["role"] == "user"
        assert sent["message"]["parts"][0] == {"kind": "text", "text": "hello"}
        assert sent["configuration"]["blocking"] is True
        only_0_3_reached_the_upstream(formation)


async def test_return_immediately_is_sent_as_blocking_false() -> None:
    async with gateway_member(binding=V03) as formation:
        async with formation.client(formation.planner) as client:
            body = await rpc(client, "SendMessage", send_params("slow: 1", immediately=True))
            task = body["result"]["task"]
            assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
            done = await finished(client, task["id"])
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert formation.recorder.rpc("message/send")[0].params["configuration"] == \
            {"blocking": False}


async def test_a_stream_is_relayed_event_by_event_as_1_0_stream_responses() -> None:
    async with gateway_member(binding=V03) as formation:
        async with formation.client(formation.operator) as client:
            response = await client.post("/", json={
                "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
                "params": send_params("stream: go")})
        results = sse_results(response.text)
        keys = [next(iter(result)) for result in results]
        assert keys[0] == "task" and "statusUpdate" in keys and "artifactUpdate" in keys
        states = [r["statusUpdate"]["status"]["state"] for r in results if "statusUpdate" in r]
        assert states[-1] == "TASK_STATE_COMPLETED"
        assert all("final" not in r.get("statusUpdate", {}) for r in results)
        assert formation.recorder.rpc_methods()[0] == "message/stream"
        only_0_3_reached_the_upstream(formation)


async def test_a_stream_through_the_rest_binding_is_1_0_too() -> None:
    async with gateway_member(binding=V03) as formation:
        async with formation.client(formation.operator) as client:
            response = await client.post("/message:stream", json=send_params("stream: go"))
        assert response.status_code == 200
        events = [json.loads(line[5:]) for line in response.text.splitlines()
                  if line.startswith("data:")]
        assert "task" in events[0] and "statusUpdate" in events[-1]
        only_0_3_reached_the_upstream(formation)


async def test_history_length_zero_gives_no_history_and_a_positive_one_is_sent() -> None:
    async with gateway_member(binding=V03) as formation:
        async with formation.client(formation.planner) as client:
            task = (await rpc(client, "SendMessage", send_params("hello")))["result"]["task"]
            none = (await rpc(client, "GetTask", {"id": task["id"], "historyLength": 0}))
            some = (await rpc(client, "GetTask", {"id": task["id"], "historyLength": 1}))
        assert "history" not in none["result"]
        assert some["result"]["id"] == task["id"]  # (this upstream keeps no history;
        # reading one is tests/gateway/relay/test_v03_mapping.py's)
        gets = formation.recorder.rpc("tasks/get")
        assert gets[0].params == {"id": task["id"]}
        assert gets[1].params == {"id": task["id"], "historyLength": 1}


async def test_an_input_required_task_continues_with_a_follow_up() -> None:
    async with gateway_member(binding=V03) as formation:
        async with formation.client(formation.planner) as client:
            task = (await rpc(client, "SendMessage", send_params("input: go")))["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            more = send_params("more", taskId=task["id"], contextId=task["contextId"])
            resumed = (await rpc(client, "SendMessage", more))["result"]["task"]
        assert resumed["status"]["state"] == "TASK_STATE_COMPLETED"
        follow_up = formation.recorder.rpc("message/send")[1].params["message"]
        assert follow_up["taskId"] == task["id"]


async def test_cancel_and_subscribe_are_relayed_as_their_0_3_methods() -> None:
    async with gateway_member(binding=V03) as formation:
        async with formation.client(formation.operator) as client:
            task = (await rpc(client, "SendMessage", send_params("slow: 5", immediately=True)))
            task_id = task["result"]["task"]["id"]

            async def subscribe() -> list[dict[str, Any]]:
                response = await client.post("/", json={
                    "jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask",
                    "params": {"id": task_id}})
                return sse_results(response.text)

            events = asyncio.create_task(subscribe())
            async with asyncio.timeout(WAIT_S):
                while not formation.recorder.rpc("tasks/resubscribe"):
                    await asyncio.sleep(0.02)
            canceled = await rpc(client, "CancelTask", {"id": task_id})
            assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
            streamed = await asyncio.wait_for(events, WAIT_S)
        states = [e["statusUpdate"]["status"]["state"] for e in streamed if "statusUpdate" in e]
        assert "TASK_STATE_CANCELED" in states
        only_0_3_reached_the_upstream(formation)


async def test_a_failed_task_and_an_unknown_task_keep_their_meaning() -> None:
    async with gateway_member(binding=V03) as formation:
        async with formation.client(formation.operator) as client:
            failed = (await rpc(client, "SendMessage", send_params("fail: now")))["result"]
            missing = await rpc(client, "GetTask", {"id": "no-such-task"})
        assert failed["task"]["status"]["state"] == "TASK_STATE_FAILED"
        assert missing["error"]["code"] == -32001


async def test_a_0_3_upstreams_tasks_are_seen_only_by_their_caller() -> None:
    async with gateway_member(binding=V03) as formation:
        async with formation.client(formation.planner) as planner, \
                formation.client(formation.reviewer) as reviewer:
            mine = (await rpc(planner, "SendMessage", send_params("hello")))["result"]["task"]
            theirs = (await rpc(reviewer, "SendMessage", send_params("hi")))["result"]["task"]
            before = len(formation.recorder.rpc())
            stolen = await rpc(reviewer, "GetTask", {"id": mine["id"]})
            canceled = await rpc(reviewer, "CancelTask", {"id": mine["id"]})
            follow = await rpc(reviewer, "SendMessage",
                               send_params("more", taskId=mine["id"]))
            assert len(formation.recorder.rpc()) == before  # none reached the upstream
            listed = (await rpc(planner, "ListTasks", {}))["result"]
            other = (await rpc(reviewer, "ListTasks", {}))["result"]
        for refused in (stolen, canceled, follow):
            assert refused["error"]["code"] == -32001
        assert [task["id"] for task in listed["tasks"]] == [mine["id"]]
        assert [task["id"] for task in other["tasks"]] == [theirs["id"]]
        assert listed["totalSize"] == 1
        only_0_3_reached_the_upstream(formation)


async def test_the_doors_card_is_1_0_with_the_upstreams_skills_without_0_3_security() -> None:
    async with gateway_member(binding=V03) as formation:
        formation.door.set_url(BASE_URL + "/")
        async with formation.client(formation.operator) as client:
            card = (await client.get("/.well-known/agent-card.json")).json()
        assert card["name"] == "upstream-coder"
        assert "url" not in card and "preferredTransport" not in card
        assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0"}
        assert card["skills"][0]["id"] == "scripted"
        assert "security" not in card["skills"][0]


async def test_a_grpc_caller_is_served_1_0_in_front_of_a_0_3_upstream() -> None:
    grpc = pytest.importorskip("grpc", reason="the grpc extra is not installed")
    from a2a.types import a2a_pb2, a2a_pb2_grpc
    from google.protobuf import json_format

    async with gateway_member(binding=V03) as formation:
        address = await formation.door.serve_grpc()
        assert address is not None
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)
                request = json_format.ParseDict(send_params("over grpc"),
                                                a2a_pb2.SendMessageRequest())
                answer = await stub.SendMessage(request, metadata=[
                    ("a2a-version", "1.0"),
                    ("authorization", f"Bearer {formation.operator}")])
        finally:
            await formation.door.stop_grpc()
        assert answer.task.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED
        assert answer.task.artifacts[0].parts[0].text == "heard: over grpc"
        only_0_3_reached_the_upstream(formation)
