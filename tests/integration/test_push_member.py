"""A real member (``mur run --capsule``) whose manifest sets ``network.push.allow``, and a
webhook on loopback served by uvicorn in the test: the card says so; a2a-sdk's client
sets a configuration on a held task, which then runs to its end; the webhook receives
every event in order with its token; the session's trace holds a ``push_delivery``
record for each; a webhook off the list is refused by name."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    ListTaskPushNotificationConfigsRequest,
    TaskPushNotificationConfig,
)

from tests.support import member as support
from tests.support.door import serve
from tests.support.member import Project

pytestmark = pytest.mark.integration

HOOK_TOKEN = "the-receiver-checks-this"


class Hook:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.received.append({"headers": {k.decode(): v.decode() for k, v in scope["headers"]},
                              "body": json.loads(body)})
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


async def test_a_member_pushes_every_event_of_a_task_to_an_allowed_webhook(
        project: Project, tmp_path: Path) -> None:
    hook = Hook()
    gate = tmp_path / "go"
    async with serve(hook) as hook_url:
        address = hook_url.removeprefix("http://")
        project.capsule("pusher", authentication=f"{{}}\n  push: {{allow: ['{address}']}}")
        member = project.run("pusher")
        headers = {"Authorization": f"Bearer {member.token}", "A2A-Version": "1.0"}
        async with httpx.AsyncClient(headers=headers, timeout=20.0) as http:
            card = (await http.get(member.door + "/.well-known/agent-card.json")).json()
            held = (await http.post(member.door + "/", json={
                "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                    "message": {"messageId": "m1", "role": "ROLE_USER",
                                "parts": [{"text": f"wait-for {gate}"}]},
                    "configuration": {"returnImmediately": True}}})).json()["result"]["task"]
            client = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(
                member.door)
            created = await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=held["id"], url=f"{hook_url}/events",
                                           token=HOOK_TOKEN))
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=held["id"]))
            off_list = (await http.post(member.door + "/", json={
                "jsonrpc": "2.0", "id": 2, "method": "CreateTaskPushNotificationConfig",
                "params": {"taskId": held["id"], "url": "http://127.0.0.1:1/x"}})).json()
            gate.write_text("go")
            async with asyncio.timeout(20):
                while not hook.received or "statusUpdate" not in hook.received[-1]["body"] \
                        or hook.received[-1]["body"]["statusUpdate"]["status"]["state"] != \
                        "TASK_STATE_COMPLETED":
                    await asyncio.sleep(0.05)
            await client.close()
    member.signal()
    assert member.wait() == 0
    assert card["capabilities"]["pushNotifications"] is True
    assert created.id and created.task_id == held["id"]
    assert [config.id for config in listed.configs] == [created.id]
    assert off_list["error"]["code"] == -32602 and "network.push.allow" in \
        off_list["error"]["message"]
    bodies = [hit["body"] for hit in hook.received]
    assert next(iter(bodies[0])) == "task" and bodies[0]["task"]["id"] == held["id"]
    assert bodies[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all(hit["headers"]["x-a2a-notification-token"] == HOOK_TOKEN
               and "authorization" not in hit["headers"] for hit in hook.received), \
        "the configuration's token, and no credential of the door's"
    deliveries = [r for r in member.trace() if r["event"] == "push_delivery"]
    assert [r["outcome"] for r in deliveries] == ["delivered"] * len(bodies)
    assert {r["url"] for r in deliveries} == {hook_url}
