"""The door's HTTP+JSON binding on its own terms (gateway/door/rest_binding.py,
docs/bindings.md): the google.rpc.Status of each error row and its HTTP status,
Retry-After, 405 with Allow, 404, the tenant prefix, the query, the Content-Type rules (and the
cross-site POST they stop), the body bound, SSE framing, and DoorAuth in front of it:
every refusal in its order, the credential kept from the app, the public card. The
behaviour both bindings share is in test_bindings.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import gateway.sse
from gateway.a2a.jsonrpc import (
    BAD_REQUEST_TYPE,
    ERROR_INFO_TYPE,
    ERROR_TABLE,
    RETRY_INFO_TYPE,
    RpcError,
)
from gateway.a2a.models import ListTasksRequest
from gateway.auth.door_auth import AuthPolicy, DoorAuth
from gateway.caller import CALLER_SCOPE_KEY
from gateway.door.app import OPERATOR_CALLER, Door, DoorSettings, build_door
from gateway.door.local_methods import LocalMethods
from gateway.door.tasks import GateConfig
from gateway.routes import ROUTE_SCOPE_KEY
from gateway.types import Message
from tests.support.bindings import (
    Agent,
    Formation,
    clients,
    formation,
    send_params,
    settle,
    sse_events,
    subscribed,
)
from tests.support.door import BASE_URL, card_info

A2A = {"A2A-Version": "1.0"}
JSON = {"Content-Type": "application/json"}
EVIL = "https://evil.example"
WORKING = "TASK_STATE_WORKING"


def public_door(*, gate: GateConfig | None = None,
                max_body: int = 1 << 20) -> tuple[Door, Agent]:
    """A public door (no credential asked) with the scriptable agent."""
    agent = Agent()
    door = build_door(agent, DoorSettings(card=card_info(),
                                          gate=gate or GateConfig(concurrency=4, queue_depth=4)),
                      policy=AuthPolicy(max_body=max_body))
    return door, agent


def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL,
                             headers=A2A)


def body(text: str, **extra: Any) -> bytes:
    return json.dumps(send_params(text, **extra)).encode()


def status_of(response: httpx.Response, reason: str) -> dict[str, Any]:
    """Assert ``response`` is the google.rpc.Status of the table row ``reason`` with that
    row's HTTP status; return the document's ``error``."""
    spec = ERROR_TABLE[reason]
    assert response.status_code == spec.http, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/a2a+json"
    document = response.json()
    assert set(document) == {"error"}
    error: dict[str, Any] = document["error"]
    assert set(error) == {"code", "status", "message", "details"}
    assert error["code"] == spec.http and error["status"] == spec.status
    assert error["message"].startswith(spec.message)
    info = error["details"][0]
    assert info["@type"] == ERROR_INFO_TYPE
    assert (info["reason"], info["domain"]) == (spec.reason, spec.domain)
    assert isinstance(info["metadata"], dict)
    return error


async def start(client: httpx.AsyncClient, text: str = "hello", *,
                immediately: bool = False, path: str = "/message:send") -> str:
    response = await client.post(path, content=body(text, immediately=immediately),
                                 headers={**A2A, **JSON})
    assert response.status_code == 200, response.text
    return str(response.json()["task"]["id"])


def state_in(door: Door, task_id: str) -> str:
    return str(door.task(task_id)["status"]["state"])


# --- the error rows ------------------------------------------------------------------


async def test_every_error_row_the_door_can_give_is_a_status_with_its_http_status(
        monkeypatch: pytest.MonkeyPatch) -> None:
    door, agent = public_door(gate=GateConfig(concurrency=1, queue_depth=0))
    async with client_for(door.app) as client:
        done = await start(client)
        answers = {
            "TASK_NOT_FOUND": await client.get("/tasks/no-such-task"),
            "TASK_NOT_CANCELABLE": await client.post(f"/tasks/{done}:cancel"),
            "PUSH_NOTIFICATION_NOT_SUPPORTED": await client.get(
                f"/tasks/{done}/pushNotificationConfigs"),
            "UNSUPPORTED_OPERATION": await client.get("/extendedAgentCard"),
            "CONTENT_TYPE_NOT_SUPPORTED": await client.post(
                "/message:send", content=body("x"), headers={"Content-Type": "text/plain"}),
            "VERSION_NOT_SUPPORTED": await client.get("/tasks", headers={"A2A-Version": ""}),
            "PARSE_ERROR": await client.post("/message:send", content=b'{"message":',
                                             headers=JSON),
            "INVALID_REQUEST": await client.post("/message:send", content=b"[]", headers=JSON),
            "INVALID_PARAMS": await client.get("/tasks?pageSize=abc"),
        }
        await door.drained()  # the ended task gives its place back
        held = await start(client, "hold", immediately=True)
        answers["MEMBER_BUSY"] = await client.post("/message:send", content=body("x"),
                                                   headers=JSON)
        await settle(door, agent)

        def explode(*args: Any, **kwargs: Any) -> Any:
            raise KeyError("/secret/internal/path")

        monkeypatch.setattr(door.store, "list_tasks", explode)
        answers["INTERNAL_ERROR"] = await client.get("/tasks")
    for reason, response in answers.items():
        status_of(response, reason)
    assert state_in(door, held) == "TASK_STATE_COMPLETED"
    assert "secret" not in answers["INTERNAL_ERROR"].text
    assert answers["INTERNAL_ERROR"].json()["error"]["message"] == "Internal error"
    version = answers["VERSION_NOT_SUPPORTED"].json()["error"]["details"][0]["metadata"]
    assert version == {"requestedVersion": "0.3", "supportedVersions": "1.0"}
    content_type = answers["CONTENT_TYPE_NOT_SUPPORTED"].json()["error"]["details"][0]
    assert content_type["metadata"] == {
        "supportedContentTypes": "application/a2a+json, application/json"}


async def test_the_status_holds_the_same_error_as_json_rpc() -> None:
    door, agent = public_door(gate=GateConfig(concurrency=1, queue_depth=0, retry_after_ms=750))
    async with client_for(door.app) as client:

        async def rpc_error(method: str, params: dict[str, Any]) -> dict[str, Any]:
            answer = await client.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                  "params": params})
            error: dict[str, Any] = answer.json()["error"]
            return error

        pairs = [
            (await rpc_error("GetTask", {"id": "nope"}), await client.get("/tasks/nope"),
             "TASK_NOT_FOUND"),
            (await rpc_error("ListTasks", {"pageSize": 0}), await client.get("/tasks?pageSize=0"),
             "INVALID_PARAMS"),
        ]
        await start(client, "hold", immediately=True)
        pairs.append((await rpc_error("SendMessage", send_params("x")),
                      await client.post("/message:send", content=body("x"), headers=JSON),
                      "MEMBER_BUSY"))
        await settle(door, agent)
    for rpc, response, reason in pairs:
        status = status_of(response, reason)
        assert status["message"] == rpc["message"]
        assert status["details"] == rpc["data"], reason
    busy = pairs[2][1].json()["error"]["details"]
    assert busy[0]["domain"] == "murmur.nexus" and busy[0]["metadata"]["retryAfterMs"] == "750"
    assert busy[1] == {"@type": RETRY_INFO_TYPE, "retryDelay": "0.750s"}
    violations = pairs[1][1].json()["error"]["details"][1]
    assert violations["@type"] == BAD_REQUEST_TYPE
    assert violations["fieldViolations"][0]["field"] == "pageSize"


@pytest.mark.parametrize("retry_after_ms, header", [(1, "1"), (750, "1"), (1000, "1"),
                                                   (1500, "2"), (2000, "2")])
@pytest.mark.parametrize("path", ["/message:send", "/message:stream"])
async def test_a_busy_member_is_503_with_retry_after_in_whole_seconds_rounded_up(
        retry_after_ms: int, header: str, path: str) -> None:
    door, agent = public_door(gate=GateConfig(concurrency=1, queue_depth=0,
                                              retry_after_ms=retry_after_ms))
    async with client_for(door.app) as client:
        await start(client, "hold", immediately=True)
        busy = await client.post(path, content=body("x"), headers=JSON)
        await settle(door, agent)
        after = await client.post(path, content=body("later"), headers=JSON)
    error = status_of(busy, "MEMBER_BUSY")
    assert busy.headers["retry-after"] == header
    assert error["details"][0]["metadata"] == {"retryAfterMs": str(retry_after_ms)}
    assert after.status_code == 200 and "retry-after" not in after.headers


async def test_only_a_busy_member_says_retry_after() -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        refusals = [await client.get("/tasks/nope"), await client.get("/tasks?pageSize=0"),
                    await client.get("/extendedAgentCard")]
    assert [r.status_code for r in refusals] == [404, 400, 400]
    assert all("retry-after" not in r.headers for r in refusals)


# --- routes --------------------------------------------------------------------------


@pytest.mark.parametrize("verb, path, allow", [
    ("GET", "/message:send", "POST"), ("PUT", "/message:stream", "POST"),
    ("DELETE", "/tasks/t-1", "GET"), ("POST", "/tasks/t-1", "GET"),
    ("POST", "/tasks", "GET"), ("GET", "/tasks/t-1:cancel", "POST"),
    ("DELETE", "/tasks/t-1:subscribe", "GET, POST"),
    ("PUT", "/tasks/t-1/pushNotificationConfigs", "POST, GET"),
    ("POST", "/tasks/t-1/pushNotificationConfigs/c-1", "GET, DELETE"),
    ("POST", "/extendedAgentCard", "GET"), ("HEAD", "/tasks", "GET"),
    ("GET", "/acme/message:send", "POST"), ("DELETE", "/acme/tasks/t-1:cancel", "POST"),
])
async def test_a_path_of_the_binding_with_another_verb_is_405_with_allow(
        verb: str, path: str, allow: str) -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        response = await client.request(verb, path, headers=JSON)
        listed = await client.get("/tasks")
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    if verb != "HEAD":
        assert response.headers["content-type"] == "application/a2a+json"
        assert response.json() == {"error": {
            "code": 405, "status": "UNIMPLEMENTED",
            "message": f"This path answers {allow} only."}}, "a google.rpc.Status body"
    assert listed.json()["totalSize"] == 0


@pytest.mark.parametrize("path", [
    "/nothing", "/message", "/message:sendx", "/messages:send", "/tasks/t-1/history",
    "/tasks/t-1/pushNotificationConfigs/c-1/more", "/tasks/t-1/pushNotificationConfig",
    "/acme/corp/tasks", "/acme/corp/message:send", "/v1/v2/tasks/t-1", "/acme/nothing",
    "/task/t-1", "/extendedAgentCard/x",
])
async def test_any_other_path_is_the_doors_404(path: str) -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        answers = [await client.get(path), await client.post(path, headers=JSON)]
    for response in answers:
        assert response.status_code == 404, path
        assert response.headers["content-type"] == "application/a2a+json"
        assert response.json() == {"error": {
            "code": 404, "status": "NOT_FOUND",
            "message": "There is nothing at this path."}}, "a google.rpc.Status body"


async def test_one_tenant_segment_reaches_every_method_and_changes_nothing() -> None:
    door, agent = public_door()
    async with client_for(door.app) as client:
        task_id = await start(client, "hold", immediately=True, path="/acme/message:send")
        got = await client.get(f"/acme/tasks/{task_id}")
        untenanted = await client.get(f"/tasks/{task_id}")
        other_tenant = await client.get(f"/globex/tasks/{task_id}")
        listed = await client.get("/acme/tasks")
        following = asyncio.create_task(client.get(f"/acme/tasks/{task_id}:subscribe"))
        await subscribed(door, task_id)
        canceled = await client.post(f"/acme/tasks/{task_id}:cancel")
        stream = await asyncio.wait_for(following, 5)
        streamed = await client.post("/acme/message:stream", content=body("hi"), headers=JSON)
        unknown = await client.get("/acme/tasks/nope")
        card = await client.get("/acme/extendedAgentCard")
        push = await client.get(f"/acme/tasks/{task_id}/pushNotificationConfigs/c-1")
        await settle(door, agent)
    assert got.status_code == 200 and got.json() == untenanted.json() == other_tenant.json()
    assert [task["id"] for task in listed.json()["tasks"]] == [task_id]
    assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELED"
    assert state_in(door, task_id) == "TASK_STATE_CANCELED"
    events = [json.loads(data) for _, data in sse_events(stream.text)]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert json.loads(sse_events(streamed.text)[-1][1])["statusUpdate"]["status"]["state"] == (
        "TASK_STATE_COMPLETED")
    status_of(unknown, "TASK_NOT_FOUND")
    status_of(card, "UNSUPPORTED_OPERATION")
    status_of(push, "PUSH_NOTIFICATION_NOT_SUPPORTED")


async def test_a_version_in_the_query_is_read_as_the_header_is() -> None:
    door, _ = public_door()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app),
                                 base_url=BASE_URL) as client:
        served = await client.get("/tasks?A2A-Version=1.0")
        old = await client.get("/tasks?A2A-Version=0.3")
        none = await client.get("/tasks")
    assert served.status_code == 200 and served.json()["totalSize"] == 0
    assert status_of(old, "VERSION_NOT_SUPPORTED")["details"][0]["metadata"][
        "requestedVersion"] == "0.3"
    status_of(none, "VERSION_NOT_SUPPORTED")


async def test_the_checks_come_in_the_documented_order() -> None:
    door, _ = public_door(max_body=64)
    bare = {"A2A-Version": ""}
    push = "/tasks/t-1/pushNotificationConfigs"
    async with client_for(door.app) as client:
        wrong_verb = await client.put(push, content=b"not json", headers=bare)
        content_type = await client.post(push, content=b"x" * 500,
                                         headers={**bare, "Content-Type": "text/plain"})
        too_large = await client.post(push, content=b"{}" + b" " * 500, headers={**bare, **JSON})
        parse = await client.post(push, content=b"{", headers={**bare, **JSON})
        version = await client.post(push, content=b"{}", headers={**bare, **JSON})
        method = await client.post(push, content=b'{"url": 5}', headers=JSON)
        params = await client.get("/tasks?pageSize=0&historyLength=-1")
    assert wrong_verb.status_code == 405
    status_of(content_type, "CONTENT_TYPE_NOT_SUPPORTED")
    assert too_large.status_code == 413
    status_of(parse, "PARSE_ERROR")
    status_of(version, "VERSION_NOT_SUPPORTED")
    status_of(method, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    assert "pageSize" in status_of(params, "INVALID_PARAMS")["message"]


# --- the query -----------------------------------------------------------------------


@pytest.mark.parametrize("query, field", [
    ("pageSize=abc", "pageSize"), ("pageSize=-1", "pageSize"), ("pageSize=0", "pageSize"),
    ("pageSize=101", "pageSize"), ("pageSize=", "pageSize"), ("historyLength=x", "historyLength"),
    ("historyLength=-2", "historyLength"), ("includeArtifacts=maybe", "includeArtifacts"),
    ("page%53ize=abc", "pageSize"), ("statusTimestampAfter=yesterday", "statusTimestampAfter"),
])
async def test_a_query_value_of_the_wrong_type_is_invalid_params_naming_it(
        query: str, field: str) -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        response = await client.get(f"/tasks?{query}")
    error = status_of(response, "INVALID_PARAMS")
    assert error["message"].startswith(f"Invalid parameters: {field}: "), error["message"]


async def test_get_task_reads_history_length_and_names_it_when_wrong() -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        task_id = await start(client)
        none = await client.get(f"/tasks/{task_id}?historyLength=0")
        one = await client.get(f"/tasks/{task_id}?historyLength=1")
        wrong = await client.get(f"/tasks/{task_id}?historyLength=x")
    assert none.status_code == 200 and "history" not in none.json()
    assert len(one.json()["history"]) == 1
    assert "historyLength" in status_of(wrong, "INVALID_PARAMS")["message"]


async def test_unknown_and_foreign_query_names_are_ignored() -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        first, second = await start(client, "one"), await start(client, "two")
        listed = await client.get(f"/tasks?foo=bar&pageSize=1&id={first}&tenant=x&limit=abc")
        got = await client.get(f"/tasks/{first}?pageSize=abc&id={second}&includeArtifacts=no")
        repeated = await client.get("/tasks?pageSize=1&pageSize=abc")
    assert listed.status_code == 200
    assert listed.json()["pageSize"] == 1 and len(listed.json()["tasks"]) == 1
    assert got.status_code == 200 and got.json()["id"] == first, "the path's id wins"
    assert repeated.status_code == 200 and repeated.json()["pageSize"] == 1, "the first counts"


@pytest.mark.parametrize("value, included", [("true", True), ("false", False), (None, False)])
async def test_include_artifacts_is_read_as_a_boolean(value: str | None, included: bool) -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        await start(client)
        query = "" if value is None else f"?includeArtifacts={value}"
        listed = await client.get(f"/tasks{query}")
    task = listed.json()["tasks"][0]
    assert ("artifacts" in task) is included
    if included:
        assert task["artifacts"][0]["parts"] == [{"text": "echo: hello"}]


@pytest.mark.parametrize("value", ["TRUE", "yes", "1", "on", ""])
async def test_include_artifacts_other_than_true_or_false_is_refused(value: str) -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        listed = await client.get(f"/tasks?includeArtifacts={value}")
    assert listed.status_code == 400, "a strict boolean (A2A v1.0.1)"
    assert "includeArtifacts" in listed.json()["error"]["message"] or \
        "include_artifacts" in listed.json()["error"]["message"]


async def test_list_filters_read_from_the_query() -> None:
    door, agent = public_door()
    async with client_for(door.app) as client:
        in_a = await client.post("/message:send", headers=JSON, content=json.dumps(
            {"message": {"messageId": "m-a", "role": "ROLE_USER", "parts": [{"text": "a"}],
                         "contextId": "ctx a+b"}}).encode())
        held = await start(client, "hold", immediately=True)
        by_context = await client.get("/tasks?contextId=ctx+a%2Bb")
        working = await client.get("/tasks?status=TASK_STATE_WORKING")
        unknown_status = await client.get("/tasks?status=NO_SUCH_STATE")
        later = await client.get("/tasks?statusTimestampAfter=2999-01-01T00:00:00Z")
        await settle(door, agent)
    assert [t["id"] for t in by_context.json()["tasks"]] == [in_a.json()["task"]["id"]]
    assert [t["id"] for t in working.json()["tasks"]] == [held]
    assert unknown_status.status_code == 400, "an unknown status name is refused (v1.0.1)"
    assert "status" in unknown_status.json()["error"]["message"]
    assert later.json()["tasks"] == []


async def test_a_body_id_cannot_redirect_a_cancel_to_another_task() -> None:
    door, agent = public_door()
    async with client_for(door.app) as client:
        named, other = (await start(client, "hold", immediately=True),
                        await start(client, "hold", immediately=True))
        canceled = await client.post(f"/tasks/{named}:cancel", headers=JSON,
                                     content=json.dumps({"id": other}).encode())
        await settle(door, agent)
    assert canceled.json()["id"] == named
    assert state_in(door, named) == "TASK_STATE_CANCELED"
    assert state_in(door, other) == "TASK_STATE_COMPLETED"


# --- Content-Type --------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [None, "text/plain",
                                          "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x",
                                          "text/plain; charset=application/json"])
@pytest.mark.parametrize("content", [b"", b'{"id": "x"}'], ids=["no body", "a body"])
async def test_cross_site_simple_post_cannot_cancel_a_task(
        content_type: str | None, content: bytes) -> None:
    # A web page may POST to any address without a preflight if the Content-Type is one
    # of the form types (or absent); its browser adds Origin. On a public door, a page the
    # user visits must not be able to cancel the member's task.
    door, agent = public_door()
    headers = {"Origin": EVIL}
    if content_type is not None:
        headers["Content-Type"] = content_type
    async with client_for(door.app) as client:
        task_id = await start(client, "hold", immediately=True)
        attack = await client.post(f"/tasks/{task_id}:cancel", content=content, headers=headers)
        still = state_in(door, task_id)
        await settle(door, agent)
    status_of(attack, "CONTENT_TYPE_NOT_SUPPORTED")
    assert still == WORKING


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain"])
async def test_a_form_post_without_origin_cannot_cancel_a_task(content_type: str) -> None:
    # Old browsers send a form's POST without Origin; its Content-Type is a form type even
    # when the body is empty. Only a POST naming no type at all may go without JSON.
    door, agent = public_door()
    async with client_for(door.app) as client:
        task_id = await start(client, "hold", immediately=True)
        attack = await client.post(f"/tasks/{task_id}:cancel",
                                   headers={"Content-Type": content_type})
        still = state_in(door, task_id)
        await settle(door, agent)
    status_of(attack, "CONTENT_TYPE_NOT_SUPPORTED")
    assert still == WORKING


@pytest.mark.parametrize("origin", ["null", "http://localhost:5173"])
async def test_a_sandboxed_or_local_page_cannot_cancel_a_task_either(origin: str) -> None:
    # "Origin: null" comes from sandboxed iframes and redirects; a page on localhost is
    # as much another site as any.
    door, agent = public_door()
    async with client_for(door.app) as client:
        task_id = await start(client, "hold", immediately=True)
        attack = await client.post(f"/tasks/{task_id}:cancel",
                                   headers={"Origin": origin, "Content-Type": "text/plain"})
        still = state_in(door, task_id)
        await settle(door, agent)
    status_of(attack, "CONTENT_TYPE_NOT_SUPPORTED")
    assert still == WORKING


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
async def test_cross_site_simple_post_cannot_start_or_follow_a_task(
        content_type: str | None) -> None:
    door, agent = public_door()
    headers = {"Origin": EVIL}
    if content_type is not None:
        headers["Content-Type"] = content_type
    async with client_for(door.app) as client:
        held = await start(client, "hold", immediately=True)
        attacks = [await client.post("/message:send", content=body("x"), headers=headers),
                   await client.post("/message:stream", content=body("x"), headers=headers),
                   await client.post(f"/tasks/{held}:subscribe", headers=headers)]
        listed = await client.get("/tasks")
        await settle(door, agent)
    for attack in attacks:
        status_of(attack, "CONTENT_TYPE_NOT_SUPPORTED")
    assert listed.json()["totalSize"] == 1, "no task was started"


async def test_a_post_with_a_body_needs_a_json_content_type_even_without_origin() -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        refused = [
            await client.post("/message:send", content=body("x")),
            await client.post("/message:send", content=body("x"),
                              headers={"Content-Type": "text/plain"}),
            await client.post("/message:send", content=body("x"),
                              headers=[("Content-Type", "application/json"),
                                       ("Content-Type", "application/json")]),
            await client.post("/message:send"),  # SendMessage always has a body
            await client.post("/tasks/t-1:cancel", content=b"{}"),
        ]
        served = [
            await client.post("/message:send", content=body("a"),
                              headers={"Content-Type": "application/a2a+json"}),
            await client.post("/message:send", content=body("b"),
                              headers={"Content-Type": "Application/JSON; charset=utf-8"}),
        ]
        listed = await client.get("/tasks")
    for response in refused:
        status_of(response, "CONTENT_TYPE_NOT_SUPPORTED")
    assert [response.status_code for response in served] == [200, 200]
    assert listed.json()["totalSize"] == 2


async def test_a_body_less_post_without_origin_needs_no_content_type() -> None:
    # a2a-sdk's REST client sends :subscribe (and may send :cancel) with no body and no
    # Content-Type.
    door, agent = public_door()
    async with client_for(door.app) as client:
        followed = await start(client, "hold", immediately=True)
        canceled = await start(client, "hold", immediately=True)
        following = asyncio.create_task(client.post(f"/tasks/{followed}:subscribe"))
        await subscribed(door, followed)
        cancel = await client.post(f"/tasks/{canceled}:cancel")
        from_page = await client.post(f"/tasks/{canceled}:cancel",
                                      headers={"Origin": EVIL, **JSON})
        agent.release.set()
        stream = await asyncio.wait_for(following, 5)
        await settle(door, agent)
    assert "content-type" not in stream.request.headers
    assert stream.headers["content-type"].startswith("text/event-stream")
    last = json.loads(sse_events(stream.text)[-1][1])
    assert last["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert cancel.status_code == 200 and cancel.json()["status"]["state"] == "TASK_STATE_CANCELED"
    # A page whose JSON request passed a CORS preflight is served like any client.
    status_of(from_page, "TASK_NOT_CANCELABLE")


async def test_the_content_type_is_judged_before_any_of_the_body_is_read() -> None:
    door, _ = public_door()
    reads: list[str] = []

    async def receive() -> dict[str, Any]:
        reads.append("read")
        return {"type": "http.request", "body": b'{"id": "t-1"}', "more_body": False}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    for extra in ([(b"content-length", b"13")], [(b"transfer-encoding", b"chunked")]):
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/tasks/t-1:cancel",
                 "raw_path": b"/tasks/t-1:cancel", "root_path": "", "query_string": b"",
                 "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000),
                 "headers": [(b"host", b"127.0.0.1:8000"), (b"a2a-version", b"1.0"),
                             (b"content-type", b"text/plain"), *extra]}
        await door.app(scope, receive, send)
    statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
    assert statuses == [400, 400]
    assert reads == [], "the body was read before the Content-Type refused it"


async def test_a_body_over_the_doors_limit_is_413() -> None:
    door, _ = public_door(max_body=300)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * 100

    async with client_for(door.app) as client:
        too_large = await client.post("/message:send", content=body("x" * 500), headers=JSON)
        chunked = await client.post("/message:send", content=chunks(), headers=JSON)
        fits = await client.post("/message:send", content=body("x" * 100), headers=JSON)
        listed = await client.get("/tasks")
    for response in (too_large, chunked):
        assert response.status_code == 413
        assert response.json()["error"] == "payload_too_large"
    assert "content-length" not in chunked.request.headers
    assert fits.status_code == 200
    assert listed.json()["totalSize"] == 1


async def test_the_app_bounds_the_body_behind_doorauth_too() -> None:
    setup = formation(max_body=300)
    async with clients(setup, "operator") as (operator,):
        response = await operator.post("/message:send", content=body("x" * 500),
                                       headers={**A2A, **JSON})
        listed = await operator.get("/tasks", headers=A2A)
    assert response.status_code == 413 and response.json()["error"] == "payload_too_large"
    assert listed.json()["totalSize"] == 0


# --- Server-Sent Events --------------------------------------------------------------


async def test_a_stream_sends_each_stream_response_bare() -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        response = await client.post("/message:stream", content=body("hello"), headers=JSON)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["cache-control"] == "no-store"
    assert response.text.endswith("\n\n")
    events = sse_events(response.text)
    assert all(name is None for name, _ in events)
    documents = [json.loads(data) for _, data in events]
    assert [next(iter(document)) for document in documents] == [
        "task", "artifactUpdate", "statusUpdate"]
    assert all(len(document) == 1 for document in documents), "no JSON-RPC wrapper"
    task_id = documents[0]["task"]["id"]
    assert documents[1]["artifactUpdate"]["taskId"] == task_id
    assert documents[2]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_an_idle_stream_gets_keep_alive_comments_between_its_events(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway.sse, "SSE_KEEPALIVE_SECONDS", 0.02)
    door, agent = public_door()
    async with client_for(door.app) as client:
        task_id = await start(client, "hold", immediately=True)
        following = asyncio.create_task(client.get(f"/tasks/{task_id}:subscribe"))
        await subscribed(door, task_id)
        await asyncio.sleep(0.15)
        agent.release.set()
        response = await asyncio.wait_for(following, 5)
    blocks = [block for block in response.text.split("\n\n") if block]
    assert blocks[0].startswith("data: {\"task\":")
    assert ": keep-alive" in blocks[1:-2], blocks
    assert all(block == ": keep-alive" or block.startswith("data: {") for block in blocks)
    documents = [json.loads(data) for _, data in sse_events(response.text)]
    assert documents[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("failure, reason", [
    (RpcError("INVALID_AGENT_RESPONSE", "the upstream sent no task"), "INVALID_AGENT_RESPONSE"),
    (KeyError("/secret/internal/path"), "INTERNAL_ERROR"),
])
async def test_a_stream_that_fails_once_open_ends_with_an_error_event_holding_the_status(
        monkeypatch: pytest.MonkeyPatch, failure: Exception, reason: str) -> None:
    async def failing(self: LocalMethods, params: dict[str, Any],
                      caller: Any) -> AsyncIterator[dict[str, Any]]:
        async def events() -> AsyncIterator[dict[str, Any]]:
            yield {"task": {"id": "t-1", "contextId": "c-1",
                            "status": {"state": "TASK_STATE_WORKING"}}}
            raise failure

        return events()

    monkeypatch.setattr(LocalMethods, "send_streaming_message", failing)
    door, _ = public_door()
    async with client_for(door.app) as client:
        response = await client.post("/message:stream", content=body("x"), headers=JSON)
    assert response.status_code == 200
    events = sse_events(response.text)
    assert [name for name, _ in events] == [None, "error"]
    assert json.loads(events[0][1])["task"]["id"] == "t-1"
    document = json.loads(events[1][1])
    spec = ERROR_TABLE[reason]
    assert document["error"]["code"] == spec.http and document["error"]["status"] == spec.status
    assert document["error"]["details"][0]["reason"] == reason
    assert "secret" not in response.text


async def test_a_stream_refused_before_it_opens_is_a_plain_status() -> None:
    door, _ = public_door()
    async with client_for(door.app) as client:
        done = await start(client)
        unknown = await client.get("/tasks/nope:subscribe")
        ended = await client.post(f"/tasks/{done}:subscribe")
        no_message = await client.post("/message:stream", content=b"{}", headers=JSON)
    status_of(unknown, "TASK_NOT_FOUND")
    status_of(ended, "UNSUPPORTED_OPERATION")
    status_of(no_message, "INVALID_PARAMS")


# --- DoorAuth in front of the binding -----------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1:9999"])
async def test_dns_rebinding_cannot_reach_the_rest_binding_of_a_public_door(host: str) -> None:
    # A page whose name was rebound to 127.0.0.1 sends its own name as Host; a public
    # door asks no credential, so the Host check is all that stands in its way.
    door, agent = public_door()
    async with client_for(door.app) as client:
        task_id = await start(client, "hold", immediately=True)
        attacks = [await client.post(f"/tasks/{task_id}:cancel", headers={"Host": host, **JSON}),
                   await client.get(f"/tasks/{task_id}", headers={"Host": host}),
                   await client.get("/tasks", headers={"Host": host}),
                   await client.post("/message:send", content=body("x"),
                                     headers={"Host": host, **JSON})]
        still = state_in(door, task_id)
        listed = await client.get("/tasks")
        await settle(door, agent)
    for attack in attacks:
        refused(attack, 421, "misdirected_request")
        assert task_id not in attack.text
    assert still == WORKING and listed.json()["totalSize"] == 1


#: Requests of the binding, each with the method DoorAuth checks it as.
REST_REQUESTS = [
    ("POST", "/message:send", "SendMessage"), ("POST", "/message:stream", "SendStreamingMessage"),
    ("GET", "/tasks/t-1", "GetTask"), ("GET", "/tasks", "ListTasks"),
    ("POST", "/tasks/t-1:cancel", "CancelTask"), ("GET", "/tasks/t-1:subscribe",
                                                 "SubscribeToTask"),
    ("POST", "/tasks/t-1/pushNotificationConfigs", "CreateTaskPushNotificationConfig"),
    ("GET", "/tasks/t-1/pushNotificationConfigs", "ListTaskPushNotificationConfigs"),
    ("GET", "/tasks/t-1/pushNotificationConfigs/c-1", "GetTaskPushNotificationConfig"),
    ("DELETE", "/tasks/t-1/pushNotificationConfigs/c-1", "DeleteTaskPushNotificationConfig"),
    ("GET", "/extendedAgentCard", "GetExtendedAgentCard"),
    ("GET", "/acme/tasks", "ListTasks"), ("GET", "/acme/extendedAgentCard",
                                          "GetExtendedAgentCard"),
]
OUT_OF_FORMATION_SCOPE = [request for request in REST_REQUESTS if request[2] not in (
    "SendMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask")]
NOT_A_METHOD = [("PUT", "/tasks/t-1"), ("GET", "/nothing"), ("DELETE", "/message:send")]


async def ask(setup: Formation, verb: str, path: str, token: str | None,
              host: str | None = None) -> httpx.Response:
    headers = {**A2A, **JSON}
    if token is not None:
        headers["Authorization"] = token
    if host is not None:
        headers["Host"] = host
    async with setup.client(None) as client:
        return await client.request(verb, path, headers=headers,
                                    content=b"{}" if verb == "POST" else None)


def refused(response: httpx.Response, status: int, code: str) -> str:
    assert (response.status_code, response.json()["error"]) == (status, code), response.text
    assert set(response.json()) == {"error", "message"}
    assert response.headers["content-type"] == "application/json"
    return str(response.json()["message"])


@pytest.mark.parametrize("verb, path", [(v, p) for v, p, _ in REST_REQUESTS] + NOT_A_METHOD)
async def test_a_missing_authorization_header_beats_every_other_check(verb: str,
                                                                      path: str) -> None:
    setup = formation(accept_peer_tasks=False, max_body=1)
    response = await ask(setup, verb, path, None, host="evil.example")
    refused(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"] == 'Bearer realm="murmur"'


@pytest.mark.parametrize("authorization", ["Bearer nope-not-a-token", "Bearer mft1.forged.x",
                                           "bearer {ci}", "Basic {ci}", "Bearer {ci} ",
                                           "Bearer "])
@pytest.mark.parametrize("verb, path", [("GET", "/extendedAgentCard"), ("POST", "/message:send"),
                                        ("GET", "/nothing")])
async def test_a_bad_token_is_invalid_token_before_the_door_or_host_is_judged(
        authorization: str, verb: str, path: str) -> None:
    setup = formation()
    token = authorization.format(ci=setup.tokens["ci"])
    response = await ask(setup, verb, path, token, host="evil.example")
    refused(response, 401, "invalid_token")
    assert response.headers["www-authenticate"] == 'Bearer realm="murmur", error="invalid_token"'


@pytest.mark.parametrize("verb, path, _method", REST_REQUESTS)
async def test_a_formation_token_for_another_door_is_not_permitted(
        verb: str, path: str, _method: str) -> None:
    setup = formation(accept_peer_tasks=False)
    response = await ask(setup, verb, path, f"Bearer {setup.tokens['planner-to-reviewer']}",
                         host="evil.example")
    message = refused(response, 403, "not_permitted")
    assert message == "Member planner holds no formation token for this member's door."


@pytest.mark.parametrize("verb, path, method", OUT_OF_FORMATION_SCOPE)
async def test_a_formation_token_on_a_method_outside_its_scopes_is_insufficient_scope(
        verb: str, path: str, method: str) -> None:
    setup = formation(accept_peer_tasks=False)  # the scope check comes before the peer check
    response = await ask(setup, verb, path, f"Bearer {setup.tokens['planner']}",
                         host="evil.example")
    message = refused(response, 403, "insufficient_scope")
    assert message == f"The credential member:planner may not call {method}."
    assert response.headers["www-authenticate"] == (
        'Bearer realm="murmur", error="insufficient_scope"')


async def test_a_declared_bearer_reaches_exactly_its_scopes_on_rest() -> None:
    setup = formation()
    async with clients(setup, "reader") as (reader,):
        task_id = await start(reader, "hold", immediately=True)
    reader_token = f"Bearer {setup.tokens['reader']}"
    answers = {(verb, path): await ask(setup, verb, path, reader_token) for verb, path in [
        ("GET", "/tasks"), ("GET", "/acme/tasks"), ("POST", "/tasks/x:cancel"),
        ("POST", f"/tasks/{task_id}:cancel"), ("GET", "/tasks/x:subscribe"),
        ("POST", "/message:stream")]}
    for (verb, path), response in answers.items():
        message = refused(response, 403, "insufficient_scope")
        assert message.startswith("The credential bearer:reader may not call "), (verb, path)
    assert "ListTasks" in refused(answers[("GET", "/tasks")], 403, "insufficient_scope")
    assert "CancelTask" in refused(answers[("POST", "/tasks/x:cancel")], 403,
                                   "insufficient_scope")
    own = await ask(setup, "GET", f"/tasks/{task_id}", reader_token)
    unknown = await ask(setup, "GET", "/tasks/x", reader_token)
    card = await ask(setup, "GET", "/.well-known/agent-card.json", reader_token)
    still = state_in(setup.door, task_id)
    await settle(setup.door, setup.agent)
    assert own.status_code == 200 and own.json()["status"]["state"] == WORKING
    status_of(unknown, "TASK_NOT_FOUND")
    assert card.status_code == 200, "any accepted credential may read the card"
    assert still == WORKING, "the refused cancel did not reach the task"


@pytest.mark.parametrize("verb, path", [("GET", "/tasks/t-1"), ("GET", "/tasks"),
                                        ("POST", "/message:send"), ("POST", "/tasks/t-1:cancel"),
                                        ("GET", "/nothing"), ("PUT", "/tasks")])
async def test_a_formation_token_at_a_door_that_takes_no_peer_tasks_is_peer_not_accepted(
        verb: str, path: str) -> None:
    setup = formation(accept_peer_tasks=False)
    response = await ask(setup, verb, path, f"Bearer {setup.tokens['planner']}",
                         host="evil.example")
    refused(response, 403, "peer_not_accepted")
    assert setup.door.store.list_tasks(OPERATOR_CALLER, ListTasksRequest())["totalSize"] == 0


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1:9999",
                                  "10.0.0.1:8000"])
async def test_a_foreign_host_is_421_only_after_the_credential_checks(host: str) -> None:
    setup = formation()
    operator = f"Bearer {setup.tokens['operator']}"
    misdirected = [await ask(setup, verb, path, operator, host=host)
                   for verb, path, _ in REST_REQUESTS[:6]]
    for response in misdirected:
        refused(response, 421, "misdirected_request")
    refused(await ask(setup, "GET", "/tasks", None, host=host), 401, "unauthenticated")
    refused(await ask(setup, "GET", "/tasks", "Bearer nope", host=host), 401, "invalid_token")
    refused(await ask(setup, "GET", "/tasks", f"Bearer {setup.tokens['reader']}", host=host),
            403, "insufficient_scope")
    served = await ask(setup, "GET", "/tasks", operator, host="localhost:8000")
    assert served.status_code == 200
    assert setup.door.store.held == 0, "no refused request started a task"


async def test_the_authorization_header_never_reaches_the_app_on_rest() -> None:
    setup = formation()
    seen: list[dict[str, Any]] = []

    async def recorder(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append({"path": scope["path"], "headers": dict(scope["headers"]),
                         "caller": scope[CALLER_SCOPE_KEY].credential.name,
                         "route": scope[ROUTE_SCOPE_KEY].rest})
        await setup.door.inner_app(scope, receive, send)

    app = DoorAuth(recorder, setup.door.policy)
    spoofed = {"x-murmur-task-origin": "operator", "x-murmur-task-trust": "trusted",
               "x_murmur_task_trust": "trusted", "Origin": "http://localhost:5173"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL,
                                 headers={**A2A, **spoofed}) as client:
        answers = []
        for who in ("operator", "planner", "ci"):
            auth = {"Authorization": f"Bearer {setup.tokens[who]}"}
            sent = await client.post("/message:send", content=body(who), headers={**auth, **JSON})
            task_id = sent.json()["task"]["id"]
            answers += [sent, await client.get(f"/tasks/{task_id}", headers=auth),
                        await client.get("/acme/tasks?pageSize=5", headers=auth),
                        await client.post(f"/tasks/{task_id}:cancel", headers={**auth, **JSON})]
    assert [r.status_code for r in answers] == [200, 200, 200, 400] * 3
    assert len(seen) == 12
    for request in seen:
        names = set(request["headers"])
        assert b"authorization" not in names
        assert not names & {b"x-murmur-task-origin", b"x-murmur-task-trust",
                            b"x_murmur_task_trust"}
        assert request["headers"][b"origin"] == b"http://localhost:5173", (
            "the browser's Origin reaches the binding's Content-Type rule")
        assert request["route"] is not None, "DoorAuth handed over the route it checked"
        for token in setup.tokens.values():
            assert token.encode() not in b"".join(request["headers"].values())
    assert [request["caller"] for request in seen[::4]] == [
        "operator", "member:planner", "bearer:ci"]
    assert [request["route"].method for request in seen[:4]] == [
        "SendMessage", "GetTask", "ListTasks", "CancelTask"]
    assert seen[2]["route"].tenant == "acme"


async def test_the_origin_rule_holds_behind_doorauth() -> None:
    setup = formation()
    async with clients(setup, "operator") as (operator,):
        task_id = await start(operator, "hold", immediately=True)
        attack = await operator.post(f"/tasks/{task_id}:cancel",
                                     headers={**A2A, "Origin": EVIL, "Content-Type": "text/plain"})
        still = state_in(setup.door, task_id)
        await settle(setup.door, setup.agent)
    status_of(attack, "CONTENT_TYPE_NOT_SUPPORTED")
    assert still == WORKING


# --- the card ------------------------------------------------------------------------

CARD = "/.well-known/agent-card.json"
SESSION = "urn:murmur:session:v1"


@pytest.mark.parametrize("public_card", [False, True], ids=["private card", "public card"])
async def test_the_card_lists_both_interfaces(public_card: bool) -> None:
    setup = formation(public_card=public_card)
    async with clients(setup, "operator") as (operator,):
        card = (await operator.get(CARD)).json()
    assert card["supportedInterfaces"] == [
        {"url": BASE_URL, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": BASE_URL, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}]
    assert card["capabilities"]["pushNotifications"] is False
    assert card["capabilities"]["extendedAgentCard"] is False


async def test_a_public_card_is_served_without_the_session_to_a_request_without_a_credential(
        ) -> None:
    setup = formation(public_card=True)
    async with clients(setup, None, "operator", "planner") as (nobody, operator, planner):
        anonymous = await nobody.get(CARD)
        head = await nobody.head(CARD)
        full = await operator.get(CARD)
        peer = await planner.get(CARD)
        bad = await nobody.get(CARD, headers={"Authorization": "Bearer nope"})
        empty = await nobody.get(CARD, headers={"Authorization": ""})
        misdirected = await nobody.get(CARD, headers={"Host": "evil.example"})
    assert anonymous.status_code == 200 and head.status_code == 200
    card = anonymous.json()
    assert SESSION not in anonymous.text and "ses_0123" not in anonymous.text
    assert "extensions" not in card["capabilities"]
    assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == ["JSONRPC", "HTTP+JSON"]
    assert "bearer" in card["securitySchemes"], "the card says how to authenticate"
    assert full.status_code == 200 and peer.status_code == 200
    extensions = full.json()["capabilities"]["extensions"]
    assert [e["uri"] for e in extensions] == [SESSION]
    assert extensions[0]["params"] == {"member": "coder", "sessionId": "ses_0123",
                                       "formationId": "frm_0456"}
    assert peer.json() == full.json()
    assert {k: v for k, v in full.json().items() if k != "capabilities"} == {
        k: v for k, v in card.items() if k != "capabilities"}
    refused(bad, 401, "invalid_token")
    refused(empty, 401, "invalid_token")
    refused(misdirected, 421, "misdirected_request")


@pytest.mark.parametrize("verb, path", [(v, p) for v, p, _ in REST_REQUESTS] + NOT_A_METHOD + [
    ("POST", "/"), ("GET", "/resources/files/result.txt"), ("POST", CARD),
    ("GET", CARD + "/"), ("GET", "/acme" + CARD)])
async def test_a_public_card_opens_nothing_else(verb: str, path: str) -> None:
    setup = formation(public_card=True)
    response = await ask(setup, verb, path, None)
    refused(response, 401, "unauthenticated")


async def test_without_public_card_the_card_needs_a_credential() -> None:
    setup = formation()
    async with clients(setup, None, "operator") as (nobody, operator):
        anonymous = await nobody.get(CARD)
        head = await nobody.head(CARD)
        full = await operator.get(CARD)
    refused(anonymous, 401, "unauthenticated")
    assert head.status_code == 401
    assert SESSION in full.text
