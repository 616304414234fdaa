"""Push notifications at a door with ``network.push.allow``, against receivers served by
uvicorn on loopback:

1. delivery: every event of a task, in order, with its token and credentials; a
   receiver that fails twice gets the event on the third try; ``push_delivery`` records;
2. refused webhooks: a URL outside the allow-list, a redirecting receiver (never
   followed), a name on the list that resolves inside (DNS rebinding), a configuration
   carrying a formation or the operator token;
3. the four methods: create, get, list, delete (idempotent) on JSON-RPC and HTTP+JSON,
   per-caller visibility, a formation token refused on each, the card's capability.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.caller import PUSH_METHODS
from gateway.door.app import DoorSettings, build_door
from gateway.proxy.egress import AllowList
from gateway.push.delivery import DeliveryPolicy, PushDelivery
from tests.support.auth import CI_TOKEN, mint
from tests.support.door import card_info, serve
from tests.support.push_door import OTHER_TOKEN, Agent, PushDoor, call, push_door

pytestmark = pytest.mark.timeout(60)

HOOK_TOKEN = "receiver-checks-this-0123"
HOOK_SECRET = "webhook-credentials-4567"
RELEASE = asyncio.Event


@dataclass
class Receiver:
    """A webhook on loopback: what it was sent, and how it answers (a status per call,
    the last one repeated; a 3xx carries a Location)."""

    statuses: list[int] = field(default_factory=lambda: [200])
    received: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    url: str = ""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        status = self.statuses[min(self.calls, len(self.statuses) - 1)]
        self.calls += 1
        headers = {key.decode(): value.decode() for key, value in scope["headers"]}
        self.received.append({"path": scope["path"], "headers": headers, "status": status,
                              "body": json.loads(body) if body else None})
        extra = [(b"location", f"{self.url}/elsewhere".encode())] if 300 <= status < 400 \
            else []
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", b"0"), *extra]})
        await send({"type": "http.response.body", "body": b""})

    @property
    def delivered(self) -> list[dict[str, Any]]:
        return [hit["body"] for hit in self.received if 200 <= hit["status"] < 300]


@asynccontextmanager
async def receiver(*statuses: int) -> AsyncIterator[Receiver]:
    hook = Receiver(list(statuses) or [200])
    async with serve(hook) as url:
        hook.url = url
        yield hook


def host_port(url: str) -> str:
    return url.removeprefix("http://")


def message(text: str) -> dict[str, Any]:
    return {"messageId": f"m-{text}-{id(text)}", "role": "ROLE_USER", "parts": [{"text": text}]}


def webhook(hook: Receiver, **extra: Any) -> dict[str, Any]:
    return {"url": f"{hook.url}/hook", "token": HOOK_TOKEN,
            "authentication": {"scheme": "Bearer", "credentials": HOOK_SECRET}, **extra}


async def delivered(push: PushDoor, task_id: str) -> None:
    """Wait until every queued event of the door went out or was given up."""
    assert push.door.tasks.push is not None
    await asyncio.wait_for(push.door.tasks.push.delivery.drained(), 20)


# --------------------------------------------------------------------- 1. delivery


async def test_a_receiver_gets_every_event_of_a_task_in_order_with_its_token() -> None:
    async with receiver() as hook:
        push = push_door(host_port(hook.url))
        async with push.client(CI_TOKEN) as client:
            sent = await call(client, "SendMessage", {
                "message": message("write"),
                "configuration": {"taskPushNotificationConfig": webhook(hook)}})
            task = sent["result"]["task"]
            await delivered(push, task["id"])
    events = hook.delivered
    kinds = [next(iter(event)) for event in events]
    assert kinds[0] == "task" and events[0]["task"]["id"] == task["id"]
    assert "artifactUpdate" in kinds
    assert kinds.index("artifactUpdate") < len(kinds) - 1
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    states = [event["statusUpdate"]["status"]["state"] for event in events
              if "statusUpdate" in event]
    assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_COMPLETED"
    for hit in hook.received:
        assert hit["path"] == "/hook"
        assert hit["headers"]["x-a2a-notification-token"] == HOOK_TOKEN
        assert hit["headers"]["authorization"] == f"Bearer {HOOK_SECRET}"
        assert hit["headers"]["content-type"] == "application/a2a+json"
        assert CI_TOKEN not in json.dumps(hit["headers"]), "never the caller's credential"
    outcomes = {record["outcome"] for record in push.deliveries()}
    assert outcomes == {"delivered"}
    assert len(push.deliveries()) == len(events)
    assert all(HOOK_SECRET not in json.dumps(record) and "/hook" not in record["url"]
               for record in push.deliveries()), "no secret, no path in the record"


async def test_a_receiver_that_fails_twice_gets_the_event_on_the_third_try() -> None:
    async with receiver(500, 503, 200) as hook:
        push = push_door(host_port(hook.url))
        async with push.client(CI_TOKEN) as client:
            held = await call(client, "SendMessage", {
                "message": message("hold"), "configuration": {"returnImmediately": True}})
            task_id = held["result"]["task"]["id"]
            created = await call(client, "CreateTaskPushNotificationConfig",
                                 {"taskId": task_id, **webhook(hook)})
            await delivered(push, task_id)
            push.agent.release.set()
            await asyncio.sleep(0.05)
            await delivered(push, task_id)
    assert created["result"]["taskId"] == task_id and created["result"]["id"]
    assert [hit["status"] for hit in hook.received[:3]] == [500, 503, 200]
    first = [r for r in push.deliveries() if r["event_kind"] == "task"]
    assert [(r["attempt"], r["outcome"]) for r in first] == [
        (1, "retrying"), (2, "retrying"), (3, "delivered")]
    assert first[0]["status"] == 500
    assert hook.delivered[0]["task"]["id"] == task_id
    assert hook.delivered[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_receiver_that_never_answers_well_is_given_up_within_bounds() -> None:
    async with receiver(500) as hook:
        push = push_door(host_port(hook.url))
        assert push.door.tasks.push is not None
        push.door.tasks.push.delivery = PushDelivery(
            AllowList([host_port(hook.url)]), push.door.trace,
            DeliveryPolicy(tries=3, first_backoff=0.01))
        async with push.client(CI_TOKEN) as client:
            sent = await call(client, "SendMessage", {
                "message": message("quick"),
                "configuration": {"taskPushNotificationConfig": webhook(hook)}})
            await delivered(push, sent["result"]["task"]["id"])
    first = [r for r in push.deliveries() if r["event_kind"] == "task"]
    assert [r["outcome"] for r in first] == ["retrying", "retrying", "failed"]
    assert hook.delivered == []


# --------------------------------------------------------------------- 2. refused webhooks


async def test_a_url_outside_the_allow_list_is_refused_when_configured() -> None:
    async with receiver() as hook:
        push = push_door("127.0.0.1:1")
        async with push.client(CI_TOKEN) as client:
            refused = await call(client, "SendMessage", {
                "message": message("write"),
                "configuration": {"taskPushNotificationConfig": webhook(hook)}})
            listed = await call(client, "ListTasks", {})
    assert refused["error"]["code"] == -32602
    assert "network.push.allow" in refused["error"]["message"]
    assert listed["result"]["tasks"] == [], "a refused configuration starts no task"
    assert hook.received == []


async def test_a_redirecting_receiver_is_not_followed() -> None:
    async with receiver(302) as hook:
        push = push_door(host_port(hook.url))
        async with push.client(CI_TOKEN) as client:
            sent = await call(client, "SendMessage", {
                "message": message("write"),
                "configuration": {"taskPushNotificationConfig": webhook(hook)}})
            await delivered(push, sent["result"]["task"]["id"])
    assert [hit["path"] for hit in hook.received if hit["path"] != "/hook"] == [], \
        "the redirect's target was never asked"
    refusals = [r for r in push.deliveries() if r["outcome"] == "refused"]
    assert refusals and all("redirect" in r["error"] for r in refusals)
    assert all(r["attempt"] == 1 for r in refusals), "a redirect is not retried"


async def test_a_name_on_the_list_that_resolves_inside_is_refused() -> None:
    """DNS rebinding: the allow-list names hooks.example; it resolves to loopback."""
    async with receiver() as hook:
        port = int(hook.url.rsplit(":", 1)[1])
        push = push_door(f"hooks.example:{port}")

        async def rebinding(host: str, _port: int) -> list[str]:
            return ["127.0.0.1"] if host == "hooks.example" else []

        assert push.door.tasks.push is not None
        push.door.tasks.push.delivery = PushDelivery(
            AllowList([f"hooks.example:{port}"]), push.door.trace, resolve=rebinding)
        async with push.client(CI_TOKEN) as client:
            sent = await call(client, "SendMessage", {
                "message": message("write"), "configuration": {"taskPushNotificationConfig": {
                    "url": f"http://hooks.example:{port}/hook", "token": HOOK_TOKEN}}})
            await delivered(push, sent["result"]["task"]["id"])
    assert hook.received == []
    refusals = [r for r in push.deliveries() if r["outcome"] == "refused"]
    assert refusals and "resolves to 127.0.0.1" in refusals[0]["error"]


@pytest.mark.parametrize("where", ["token", "credentials"])
async def test_a_configuration_carrying_a_door_token_is_refused(where: str) -> None:
    push = push_door("127.0.0.1:9")
    for secret in (mint(caller="planner", callee="coder"), push.operator.value):
        config: dict[str, Any] = {"url": "http://127.0.0.1:9/hook"}
        if where == "token":
            config["token"] = secret
        else:
            config["authentication"] = {"scheme": "Bearer", "credentials": secret}
        async with push.client(CI_TOKEN) as client:
            refused = await call(client, "SendMessage", {
                "message": message("x"), "configuration": {"taskPushNotificationConfig": config}})
        assert refused["error"]["code"] == -32602
        assert "never carries a formation or operator token" in refused["error"]["message"]
        assert secret not in json.dumps(refused)


# --------------------------------------------------------------------- 3. the four methods


async def test_create_get_list_delete_on_both_bindings_for_the_owner_only() -> None:
    push = push_door("127.0.0.1:9")
    async with push.client(CI_TOKEN) as ci, push.client(OTHER_TOKEN) as other:
        held = await call(ci, "SendMessage", {"message": message("hold"),
                                              "configuration": {"returnImmediately": True}})
        task_id = held["result"]["task"]["id"]
        created = await call(ci, "CreateTaskPushNotificationConfig", {
            "taskId": task_id, "url": "http://127.0.0.1:9/a", "id": "cfg-a"})
        rest = await ci.post(f"/tasks/{task_id}/pushNotificationConfigs",
                             json={"url": "http://127.0.0.1:9/b", "id": "cfg-b"})
        got = await ci.get(f"/tasks/{task_id}/pushNotificationConfigs/cfg-b")
        listed = await call(ci, "ListTaskPushNotificationConfigs", {"taskId": task_id})
        listed_rest = await ci.get(f"/tasks/{task_id}/pushNotificationConfigs")
        theirs = await call(other, "GetTaskPushNotificationConfig",
                            {"taskId": task_id, "id": "cfg-a"})
        their_list = await call(other, "ListTaskPushNotificationConfigs", {"taskId": task_id})
        deleted = await ci.delete(f"/tasks/{task_id}/pushNotificationConfigs/cfg-a")
        again = await call(ci, "DeleteTaskPushNotificationConfig",
                           {"taskId": task_id, "id": "cfg-a"})
        gone = await call(ci, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "cfg-a"})
        push.agent.release.set()
    assert created["result"] == {"id": "cfg-a", "taskId": task_id, "url": "http://127.0.0.1:9/a"}
    assert rest.status_code == 200 and rest.json()["id"] == "cfg-b"
    assert got.status_code == 200 and got.json()["url"] == "http://127.0.0.1:9/b"
    assert {c["id"] for c in listed["result"]["configs"]} == {"cfg-a", "cfg-b"}
    assert {c["id"] for c in listed_rest.json()["configs"]} == {"cfg-a", "cfg-b"}
    assert theirs["error"]["code"] == -32001, "another caller's task is not found"
    assert their_list["error"]["code"] == -32001
    assert deleted.status_code == 200 and deleted.json() == {}
    assert again["result"] == {}, "deleting twice is no error"
    assert gone["error"]["code"] == -32001


@pytest.mark.parametrize("method", sorted(PUSH_METHODS))
async def test_a_formation_token_is_refused_on_every_push_method(method: str) -> None:
    push = push_door("127.0.0.1:9")
    async with push.client(mint(caller="planner", callee="coder")) as peer:
        response = await peer.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                              "params": {"taskId": "t", "id": "c"}})
    assert response.status_code == 403
    assert response.json()["error"] == "insufficient_scope"


async def test_the_card_says_push_notifications_only_where_allowed() -> None:
    assert push_door("127.0.0.1:9").door.card["capabilities"]["pushNotifications"] is True
    plain = build_door(Agent(), DoorSettings(card=card_info()))
    assert plain.card["capabilities"]["pushNotifications"] is False


async def test_the_push_methods_on_grpc_with_a2a_sdks_messages() -> None:
    import grpc
    from a2a.types import a2a_pb2, a2a_pb2_grpc

    push = push_door("127.0.0.1:9")
    grpc_url = await push.door.serve_grpc()
    assert grpc_url is not None
    auth = [("a2a-version", "1.0"), ("authorization", f"Bearer {CI_TOKEN}")]
    try:
        async with grpc.aio.insecure_channel(grpc_url) as channel:
            door = a2a_pb2_grpc.A2AServiceStub(channel)
            held = await door.SendMessage(a2a_pb2.SendMessageRequest(
                message=a2a_pb2.Message(message_id="m-grpc", role=a2a_pb2.ROLE_USER,
                                        parts=[a2a_pb2.Part(text="hold")]),
                configuration=a2a_pb2.SendMessageConfiguration(return_immediately=True)),
                metadata=auth)
            task_id = held.task.id
            created = await door.CreateTaskPushNotificationConfig(
                a2a_pb2.TaskPushNotificationConfig(task_id=task_id, url="http://127.0.0.1:9/h",
                                                   token="t-1"), metadata=auth)
            listed = await door.ListTaskPushNotificationConfigs(
                a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=task_id), metadata=auth)
            await door.DeleteTaskPushNotificationConfig(
                a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id=task_id,
                                                                id=created.id),
                metadata=auth)
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await door.GetTaskPushNotificationConfig(
                    a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=task_id,
                                                                 id=created.id),
                    metadata=auth)
            with pytest.raises(grpc.aio.AioRpcError) as outside:
                await door.CreateTaskPushNotificationConfig(
                    a2a_pb2.TaskPushNotificationConfig(task_id=task_id,
                                                       url="http://10.1.2.3/h"), metadata=auth)
    finally:
        push.agent.release.set()
        await push.door.stop_grpc(0.5)
    assert created.task_id == task_id and created.token == "t-1" and created.id
    assert [config.id for config in listed.configs] == [created.id]
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert outside.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_missing_field_is_named_with_a_bad_request_and_python_names_are_read() -> None:
    push = push_door("127.0.0.1:9")
    async with push.client(CI_TOKEN) as client:
        held = await call(client, "SendMessage", {"message": message("hold"),
                                                  "configuration": {"returnImmediately": True}})
        task_id = held["result"]["task"]["id"]
        missing = await call(client, "CreateTaskPushNotificationConfig",
                             {"url": "http://127.0.0.1:9/h"})
        no_id = await call(client, "GetTaskPushNotificationConfig", {"taskId": task_id})
        snake = await call(client, "CreateTaskPushNotificationConfig",
                           {"task_id": task_id, "url": "http://127.0.0.1:9/h", "id": "c"})
        listed = await call(client, "ListTaskPushNotificationConfigs", {"task_id": task_id})
        push.agent.release.set()
    assert missing["error"]["code"] == -32602 and "taskId" in missing["error"]["message"]
    assert no_id["error"]["code"] == -32602 and "id" in no_id["error"]["message"]
    assert any(detail.get("@type", "").endswith("BadRequest")
               for detail in no_id["error"]["data"]), "the field named in a BadRequest"
    assert snake["result"]["taskId"] == task_id, "Python names are read, as everywhere"
    assert [config["id"] for config in listed["result"]["configs"]] == ["c"]
