"""Push notifications attacked, at a real member (``mur run --capsule``) whose manifest
allows webhooks on loopback and declares a second caller (``ci``) with the push methods;
receivers served in the test: webhooks that answer, and receivers that accept and never
answer.

1. three hanging receivers configured by ``ci`` do not hold back the operator's webhook:
   its first event arrives within 1 s;
2. ``ci`` filling its configuration slots is refused past the bound on JSON-RPC,
   HTTP+JSON and gRPC, naming the bound, while the operator still sets one;
3. the operator token as a push token, behind a scheme word or with space around it, is
   refused and never echoed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from gateway.caller import PUSH_METHODS
from gateway.push.configs import MAX_PER_TASK
from tests.support import member as support
from tests.support.member import Member, Project
from tests.support.webhooks import hanging, webhook

pytestmark = pytest.mark.integration

CI_TOKEN = "ci-push-caller-token-0123456789abcdef"
#: Push configurations one caller may hold (docs/limits.md, Push).
MAX_PER_CALLER = 32
SCOPES = ", ".join(["SendMessage", "GetTask", "CancelTask", *sorted(PUSH_METHODS)])
NETWORK = (f"{{bearer: [{{name: ci, env: CI_PUSH_TOKEN, scopes: [{SCOPES}]}}]}}\n"
           "  push: {allow: ['127.0.0.1']}")


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def start(project: Project) -> Member:
    project.capsule("pusher", authentication=NETWORK,
                    lifecycle="concurrency: 8\nqueue_depth: 0")
    return project.run("pusher", env={"CI_PUSH_TOKEN": CI_TOKEN})


def client(member: Member, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=member.door, timeout=20.0, trust_env=False, headers={
        "Authorization": f"Bearer {token}", "A2A-Version": "1.0"})


async def call(http: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    response = await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                          "params": params})
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


def held(gate: Path, url: str | None = None) -> dict[str, Any]:
    """A task that runs until ``gate`` exists, with a configuration for ``url``."""
    configuration: dict[str, Any] = {"returnImmediately": True}
    if url is not None:
        configuration["taskPushNotificationConfig"] = {"url": url}
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                        "parts": [{"text": f"wait-for {gate}"}]},
            "configuration": configuration}


def stop(member: Member, gate: Path) -> None:
    """Let every held task end, then stop the member."""
    gate.write_text("go")
    support.wait_for(lambda: not support.running_task_ids(member), 20)
    member.signal()
    assert member.wait() == 0


async def test_three_hanging_receivers_of_one_caller_do_not_hold_back_the_operators_webhook(
        project: Project, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    member = start(project)
    async with webhook() as good, hanging() as first, hanging() as second, \
            hanging() as third:
        async with client(member, CI_TOKEN) as ci, client(member, member.token) as operator:
            for hook in (first, second, third):
                sent = await call(ci, "SendMessage", held(gate, f"{hook.url}/hook"))
                assert "result" in sent, sent
            await first.accepted(1, 10)       # the door is waiting on a receiver
            mine = await call(operator, "SendMessage", held(gate, f"{good.url}/hook"))
            await good.until(lambda bodies: len(bodies) >= 1, 1.0)
            for hook in (first, second, third):
                await hook.accepted(1, 10)    # each hangs on its own lane
    stop(member, gate)
    assert good.bodies[0]["task"]["id"] == mine["result"]["task"]["id"]


async def test_one_caller_filling_its_push_config_slots_is_refused_while_another_still_sets_one(
        project: Project, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    member = start(project)
    async with webhook() as good:
        async with client(member, CI_TOKEN) as ci, client(member, member.token) as operator:
            tasks = [(await call(ci, "SendMessage", held(gate)))["result"]["task"]["id"]
                     for _ in range(MAX_PER_CALLER // MAX_PER_TASK + 1)]
            for task_id in tasks[:-1]:
                for number in range(MAX_PER_TASK):
                    made = await call(ci, "CreateTaskPushNotificationConfig", {
                        "taskId": task_id, "url": f"{good.url}/{number}"})
                    assert "result" in made, made
            spare = tasks[-1]
            rpc = await call(ci, "CreateTaskPushNotificationConfig",
                             {"taskId": spare, "url": f"{good.url}/more"})
            rest = await ci.post(f"/tasks/{spare}/pushNotificationConfigs",
                                 json={"url": f"{good.url}/more"})
            async with grpc.aio.insecure_channel(
                    str(member.ready["grpc_url"]),
                    options=[("grpc.enable_http_proxy", 0)]) as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as on_grpc:
                    await stub.CreateTaskPushNotificationConfig(
                        a2a_pb2.TaskPushNotificationConfig(task_id=spare,
                                                           url=f"{good.url}/more"),
                        metadata=[("a2a-version", "1.0"),
                                  ("authorization", f"Bearer {CI_TOKEN}")])
            theirs = await call(operator, "SendMessage", held(gate, f"{good.url}/operator"))
            assert "result" in theirs, f"another caller still sets one: {theirs}"
            mine = theirs["result"]["task"]["id"]
            await good.until(lambda bodies: any(body.get("task", {}).get("id") == mine
                                                for body in bodies), 10)
    stop(member, gate)
    bound = f"this caller holds {MAX_PER_CALLER} push notification configurations"
    assert rpc["error"]["code"] == -32602 and bound in rpc["error"]["message"]
    assert rpc["error"]["data"][0]["metadata"]["limit"] == "push_configs_per_caller"
    assert rest.status_code == 400 and bound in rest.json()["error"]["message"]
    assert on_grpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bound in (on_grpc.value.details() or "")


@pytest.mark.parametrize("form", ["Bearer {}", "{} ", "bearer  {}"])
async def test_the_operator_token_behind_a_scheme_word_or_space_is_refused_as_a_push_token(
        project: Project, tmp_path: Path, form: str) -> None:
    gate = tmp_path / "go"
    member = start(project)
    token = member.token
    async with client(member, CI_TOKEN) as ci:
        task_id = (await call(ci, "SendMessage", held(gate)))["result"]["task"]["id"]
        refused = await call(ci, "CreateTaskPushNotificationConfig", {
            "taskId": task_id, "url": "http://127.0.0.1:9/hook", "token": form.format(token)})
        listed = await call(ci, "ListTaskPushNotificationConfigs", {"taskId": task_id})
    stop(member, gate)
    assert refused["error"]["code"] == -32602
    assert refused["error"]["message"].startswith(
        "Invalid parameters: token: a push notification never carries")
    assert token not in refused["error"]["message"] and token not in str(refused)
    assert listed["result"]["configs"] == []
    assert all(token not in line for line in member.stderr.splitlines())
