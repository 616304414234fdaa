"""Issue 53's findings behind an A2A 0.3 upstream, as real processes: ``mur run --capsule``
of a gateway member in front of a real a2a-sdk 0.3 server (``tests/agents/sdk_v03_agent.py``,
answering as BeeAI's does, run from a venv with a2a-sdk 0.3: tests/support/third_party.py
``v03_python``; without one the tests skip, naming ``make frameworks``), called with
a2a-sdk 1.x's clients. Here, beside the framework agents, because ``make test-frameworks``
makes those venvs first; the same findings run in process in ``make test``
(tests/gateway/grpc/test_grpc_error_info.py, tests/gateway/relay/).

In order, each named after its finding:

1. gRPC errors without ErrorInfo behind an A2A 0.3 upstream: cancelling an ended task
   over gRPC is a status whose ErrorInfo a2a-sdk's gRPC client maps to
   ``TaskNotCancelableError``, with the status and reason the HTTP+JSON binding gives;
2. a 0.3 upstream's stream does not begin with a Task: ``SendStreamingMessage`` and
   ``SubscribeToTask`` on JSON-RPC, HTTP+JSON and gRPC begin with the Task, then the
   upstream's own events (its ``submitted`` status update first).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from a2a.utils.errors import TaskNotCancelableError
from google.protobuf import json_format

from tests.support import third_party
from tests.support.gateway_capsules import gateway_capsule
from tests.support.grpc_clients import card_grpc_client, error_info, loopback_channel
from tests.support.member import Member, Project, install_capsule

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NAME = "beeai"
WAIT_S = 30.0
BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]


@dataclass
class Door:
    """The gateway member's door: its URLs, its operator token and its card."""

    url: str
    grpc_url: str
    token: str
    card: dict[str, Any]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "A2A-Version": "1.0"}

    @property
    def metadata(self) -> list[tuple[str, str]]:
        return [("a2a-version", "1.0"), ("authorization", f"Bearer {self.token}")]


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    """``mur run --capsule local/beeai``: the member in front of the 0.3 agent."""
    python = third_party.v03_python()
    root = tmp_path_factory.mktemp("gateway-v03")
    home = root / "home"
    home.mkdir(mode=0o700)
    project = Project(path=root / "project", home=home)
    project.path.mkdir()
    source = root / "src" / NAME
    source.mkdir(parents=True)
    shutil.copy(third_party.SDK_V03_AGENT, source / "sdk_v03_agent.py")
    gateway_capsule(source, NAME, [str(python), "sdk_v03_agent.py", "--port", "{port}",
                                   "--name", NAME])
    install_capsule(project.path, source)
    member: Member | None = None
    try:
        member = project.run(NAME)
        token = member.token
        card = httpx.get(member.door + "/.well-known/agent-card.json", trust_env=False,
                         headers={"Authorization": f"Bearer {token}"}, timeout=10.0).json()
        yield Door(member.door, str(member.ready["grpc_url"]), token, card)
    finally:
        # Ended, not killed: a standalone member killed with SIGKILL has nobody above it
        # to end its upstream, which runs in a session of its own (docs/isolation.md).
        if member is not None and member.process.poll() is None:
            member.signal()
            member.wait()
        project.cleanup()


def message(text: str) -> dict[str, Any]:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}


def request(text: str, *, return_immediately: bool = False) -> SendMessageRequest:
    sent = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=sent, configuration=SendMessageConfiguration(
        return_immediately=return_immediately))


# --------------------------------------------------------------------- 1. gRPC errors


async def test_grpc_errors_carry_error_info_behind_a_0_3_upstream(door: Door) -> None:
    async with asyncio.timeout(WAIT_S), card_grpc_client(door.card, door.token) as client:
        (event,) = [event async for event in client.send_message(request("hello"))]
        ended = event.task
        assert ended.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=ended.id))
    async with asyncio.timeout(WAIT_S), loopback_channel(door.grpc_url) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await a2a_pb2_grpc.A2AServiceStub(channel).CancelTask(
                CancelTaskRequest(id=ended.id), metadata=door.metadata, timeout=10)
    rest = httpx.post(f"{door.url}/tasks/{ended.id}:cancel", headers=door.headers,
                      trust_env=False, timeout=10.0).json()["error"]
    info = error_info(refused.value)
    assert (info.reason, info.domain) == ("TASK_NOT_CANCELABLE", "a2a-protocol.org")
    assert (info.reason, info.domain) == (rest["details"][0]["reason"],
                                          rest["details"][0]["domain"])
    assert refused.value.code().name == rest["status"] == "FAILED_PRECONDITION"


# ------------------------------------------------------------ 2. streams begin with the Task


def sse_data(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


async def streamed(door: Door, binding: str, method: str,
                   params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every event of one stream of ``method`` on ``binding``, as 1.0 StreamResponses."""
    if binding == "GRPC":
        sent: Any = (json_format.ParseDict(params, a2a_pb2.SendMessageRequest())
                     if method == "SendStreamingMessage"
                     else SubscribeToTaskRequest(id=params["id"]))
        async with loopback_channel(door.grpc_url) as channel:
            call = getattr(a2a_pb2_grpc.A2AServiceStub(channel), method)(
                sent, metadata=door.metadata, timeout=WAIT_S)
            return [json_format.MessageToDict(event) async for event in call]
    async with httpx.AsyncClient(base_url=door.url, headers=door.headers, timeout=WAIT_S,
                                 trust_env=False) as http:
        if binding == "JSONRPC":
            response = await http.post("/", json={"jsonrpc": "2.0", "id": 1,
                                                  "method": method, "params": params})
            return [document["result"] for document in sse_data(response.text)]
        path = ("/message:stream" if method == "SendStreamingMessage"
                else f"/tasks/{params['id']}:subscribe")
        response = await http.post(path, json=params)
        assert response.status_code == 200, response.text
        return sse_data(response.text)


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [next(iter(event)) for event in events]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_0_3_upstreams_stream_begins_with_a_task(door: Door, binding: str) -> None:
    sent = message(f"stream over {binding}")
    async with asyncio.timeout(WAIT_S):
        events = await streamed(door, binding, "SendStreamingMessage", {"message": sent})
    assert kinds(events)[:2] == ["task", "statusUpdate"], kinds(events)
    assert kinds(events).count("task") == 1
    task, first = events[0]["task"], events[1]["statusUpdate"]
    assert (task["id"], task["contextId"]) == (first["taskId"], first["contextId"])
    assert task["status"]["state"] == first["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert [m["messageId"] for m in task["history"]] == [sent["messageId"]]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    artifacts = [e["artifactUpdate"]["artifact"]["parts"] for e in events
                 if "artifactUpdate" in e]
    assert artifacts == [[{"text": f"{NAME} heard: stream over {binding}"}]]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_0_3_upstreams_subscription_begins_with_a_task(door: Door,
                                                               binding: str) -> None:
    async with asyncio.timeout(WAIT_S), card_grpc_client(door.card, door.token) as client:
        (event,) = [event async for event in client.send_message(
            request("slow: 1.5", return_immediately=True))]
        task_id = event.task.id
        await asyncio.sleep(0.3)  # the task works by now
        events = await streamed(door, binding, "SubscribeToTask", {"id": task_id})
    assert kinds(events)[0] == "task" and kinds(events).count("task") == 1, kinds(events)
    task = events[0]["task"]
    assert task["id"] == task_id
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert [m["parts"] for m in task["history"]][:1] == [[{"text": "slow: 1.5"}]]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
