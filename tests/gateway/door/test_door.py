"""The door in-process (httpx.ASGITransport): routes, the card, JSON-RPC rules,
visibility through the endpoint, files, StopSession, and the in-process task API."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.a2a.jsonrpc import RpcError
from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import DoorSettings, build_door
from gateway.door.tasks import GateConfig, TaskRun
from tests.support.door import (
    BASE_URL,
    card_info,
    client_for,
    make_door,
    rpc,
    send_params,
    shimmed,
    user_message,
)


async def echo(run: TaskRun) -> str:
    return f"echo: {run.text}"


class Held:
    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, run: TaskRun) -> str:
        await self.release.wait()
        return "released"


# --- routes ------------------------------------------------------------------------


async def test_healthz_answers_ok_and_names_nothing() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        response = await client.get("/healthz")
        head = await client.head("/healthz")
    assert response.status_code == 200 and response.text == "ok"
    assert head.status_code == 200 and head.content == b""


async def test_unknown_paths_and_wrong_methods() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        missing = await client.get("/nothing/here")  # /tasks/1 is the HTTP+JSON GetTask
        get_rpc = await client.get("/")
        post_card = await client.post("/.well-known/agent-card.json")
    # A path of no binding is the HTTP+JSON binding's 404: a google.rpc.Status.
    assert missing.status_code == 404
    assert missing.json() == {"error": {"code": 404, "status": "NOT_FOUND",
                                        "message": "There is nothing at this path."}}
    assert get_rpc.status_code == 405 and get_rpc.headers["allow"] == "POST"
    assert post_card.status_code == 405


async def test_json_rpc_is_served_at_every_all_slashes_path() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        for path in ("/", "//", "///"):
            response = await client.post(path, json={
                "jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
            assert response.json()["result"]["totalSize"] == 0


# --- the agent card ----------------------------------------------------------------


async def test_the_card_describes_the_member_and_its_session() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        card = (await client.get("/.well-known/agent-card.json")).json()
    assert card["name"] == "coder" and card["version"] == "1.2.0"
    assert card["supportedInterfaces"] == [
        {"url": BASE_URL, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": BASE_URL, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}]
    capabilities = card["capabilities"]
    assert capabilities["streaming"] is True and capabilities["pushNotifications"] is False
    assert capabilities["extensions"] == [{
        "uri": "urn:murmur:session:v1",
        "description": "The member's roster name, its session id and its formation id.",
        # No "required": false, its default: a signed card's canonical form has none.
        "params": {"member": "coder", "sessionId": "ses_0123", "formationId": "frm_0456"}}]
    assert card["skills"] == [{"id": "code", "name": "Code", "description": "Writes code",
                               "tags": ["code"]}]
    assert "securitySchemes" not in card, "a public door declares no scheme"


def test_an_authenticated_door_declares_the_bearer_scheme() -> None:
    door = build_door(echo, DoorSettings(card=card_info()),
                      policy=AuthPolicy(authenticated=True))
    assert door.card["securitySchemes"] == {"bearer": {"httpAuthSecurityScheme": {
        "scheme": "Bearer", "description": door.card["securitySchemes"]["bearer"][
            "httpAuthSecurityScheme"]["description"]}}}
    assert door.card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]


async def test_the_card_is_cached_and_revalidated() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        first = await client.get("/.well-known/agent-card.json")
        etag = first.headers["etag"]
        assert first.headers["cache-control"] == "private, max-age=60"
        assert first.headers["last-modified"].endswith("GMT")
        for match in (etag, f"W/{etag}", f'"other", {etag}', "*"):
            again = await client.get("/.well-known/agent-card.json",
                                     headers={"If-None-Match": match})
            assert again.status_code == 304 and again.content == b""
            assert again.headers["etag"] == etag
        stale = await client.get("/.well-known/agent-card.json",
                                 headers={"If-None-Match": '"other"'})
        assert stale.status_code == 200
        since = await client.get("/.well-known/agent-card.json",
                                 headers={"If-Modified-Since": first.headers["last-modified"]})
        assert since.status_code == 304
        door.set_url("http://127.0.0.1:9999")
        moved = await client.get("/.well-known/agent-card.json",
                                 headers={"If-None-Match": etag})
    assert moved.status_code == 200 and moved.headers["etag"] != etag
    assert moved.json()["supportedInterfaces"][0]["url"] == "http://127.0.0.1:9999"


# --- JSON-RPC rules ----------------------------------------------------------------


@pytest.mark.parametrize("headers, query", [({}, ""), ({"A2A-Version": ""}, ""),
                                           ({"A2A-Version": "0.3"}, ""),
                                           ({"A2A-Version": "2.0"}, ""),
                                           ({"A2A-Version": "1.1"}, ""),
                                           ({"A2A-Version": "one"}, ""),
                                           ({}, "?A2A-Version=0.3")])
async def test_a_version_other_than_1_0_is_version_not_supported(
        headers: dict[str, str], query: str) -> None:
    door = make_door(echo)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app),
                                 base_url=BASE_URL) as client:
        response = await client.post("/" + query, headers=headers, json={
            "jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {}})
    error = response.json()["error"]
    assert response.status_code == 200
    assert error["code"] == -32009 and "A2A-Version: 1.0" in error["message"]
    assert error["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    assert response.json()["id"] == 7


@pytest.mark.parametrize("headers, query", [({"A2A-Version": "1.0"}, ""),
                                           ({"a2a-version": " 1.0.3 "}, ""),
                                           ({}, "?A2A-Version=1.0")])
async def test_version_1_0_is_served_from_the_header_or_the_query(
        headers: dict[str, str], query: str) -> None:
    door = make_door(echo)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app),
                                 base_url=BASE_URL) as client:
        response = await client.post("/" + query, headers=headers, json={
            "jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {}})
    assert "result" in response.json()


@pytest.mark.parametrize("method, code", [("NoSuchMethod", -32601),
                                          ("CreateTaskPushNotificationConfig", -32003),
                                          ("ListTaskPushNotificationConfigs", -32003),
                                          ("GetExtendedAgentCard", -32004)])
async def test_methods_the_door_does_not_serve(method: str, code: int) -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        body = await rpc(client, method, {"taskId": "x"})
    assert body["error"]["code"] == code


async def test_a_batch_is_refused_whole() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        response = await client.post("/", json=[
            {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send_params("a")}])
        listed = await rpc(client, "ListTasks")
    assert response.json()["error"]["code"] == -32600
    assert listed["result"]["totalSize"] == 0, "no part of a batch is served"


async def test_bad_json_and_bad_params_get_clear_answers() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        parse = (await client.post("/", content=b"{\"jsonrpc\":",
                                   headers={"Content-Type": "application/json"})).json()
        params = await rpc(client, "SendMessage", {"message": {"role": "ROLE_USER"}})
        get = await rpc(client, "GetTask", {"id": "x", "historyLength": -1})
    assert parse["error"]["code"] == -32700 and parse["id"] is None
    assert params["error"]["code"] == -32602
    assert "message.messageId" in params["error"]["message"]
    assert get["error"]["code"] == -32602 and "historyLength" in get["error"]["message"]


async def test_a_body_over_the_limit_is_413() -> None:
    door = build_door(echo, DoorSettings(card=card_info()), policy=AuthPolicy(max_body=200))
    async with client_for(door.app) as client:
        response = await client.post("/", json=send_params("x" * 500))
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"


async def test_push_notification_config_on_send_is_refused() -> None:
    door = make_door(echo)
    params = send_params("x")
    params["configuration"] = {"taskPushNotificationConfig": {"url": "https://hook.example"}}
    async with client_for(door.app) as client:
        body = await rpc(client, "SendMessage", params)
        listed = await rpc(client, "ListTasks")
    assert body["error"]["code"] == -32003
    assert listed["result"]["totalSize"] == 0


async def test_an_unexpected_failure_reveals_no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    door = make_door(echo)

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("/secret/internal/path")

    monkeypatch.setattr(door.store, "list_tasks", explode)
    async with client_for(door.app) as client:
        body = await rpc(client, "ListTasks")
    assert body["error"] == {"code": -32603, "message": "Internal error", "data": [{
        "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "INTERNAL_ERROR",
        "domain": "a2a-protocol.org", "metadata": {}}]}


# --- SendMessage -------------------------------------------------------------------


async def test_send_message_blocks_until_the_task_ends() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        body = await rpc(client, "SendMessage", send_params("hi"))
    task = body["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["name"] == "result"
    assert task["artifacts"][0]["parts"] == [{"text": "echo: hi"}]
    assert task["history"][0]["taskId"] == task["id"]
    assert task["history"][0]["contextId"] == task["contextId"]


async def test_cancel_of_a_terminal_task_is_task_not_cancelable() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        task = (await rpc(client, "SendMessage", send_params("hi")))["result"]["task"]
        refused = await rpc(client, "CancelTask", {"id": task["id"]})
        after = await rpc(client, "GetTask", {"id": task["id"]})
    assert refused["error"]["code"] == -32002
    assert after["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_return_immediately_answers_before_the_agent_is_done() -> None:
    agent = Held()
    door = make_door(agent)
    async with client_for(door.app) as client:
        params = send_params("x", immediately=True)
        params["configuration"]["historyLength"] = 0
        body = await rpc(client, "SendMessage", params)
        task = body["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_WORKING"
        assert "history" not in task
        agent.release.set()
        await door.result(task["id"])
        final = await rpc(client, "GetTask", {"id": task["id"]})
    assert final["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_client_context_id_is_kept() -> None:
    door = make_door(echo)
    async with client_for(door.app) as client:
        body = await rpc(client, "SendMessage", send_params("x", contextId="ctx-mine"))
    assert body["result"]["task"]["contextId"] == "ctx-mine"


async def test_a_reply_answers_with_a_message_alone() -> None:
    async def replies(run: TaskRun) -> None:
        await run.reply(f"hello {run.text}")

    door = make_door(replies)
    async with client_for(door.app) as client:
        body = await rpc(client, "SendMessage", send_params("you", contextId="c1"))
        listed = await rpc(client, "ListTasks")
    message = body["result"]["message"]
    assert message["role"] == "ROLE_AGENT" and message["parts"] == [{"text": "hello you"}]
    assert message["contextId"] == "c1" and "taskId" not in message
    assert listed["result"]["totalSize"] == 0, "no task is kept"


async def test_the_gate_answers_busy_before_creating_a_task() -> None:
    agent = Held()
    door = make_door(agent, gate=GateConfig(concurrency=1, queue_depth=0, retry_after_ms=750))
    async with client_for(door.app) as client:
        held = await rpc(client, "SendMessage", send_params("a", immediately=True))
        busy = await rpc(client, "SendMessage", send_params("b", immediately=True))
        listed = await rpc(client, "ListTasks")
        agent.release.set()
        await door.result(held["result"]["task"]["id"])
    error = busy["error"]
    assert error["code"] == -32050 and error["message"] == "member busy"
    assert error["data"][0]["reason"] == "MEMBER_BUSY"
    assert error["data"][0]["metadata"]["retryAfterMs"] == "750"
    assert listed["result"]["totalSize"] == 1


async def test_streaming_in_process_sends_the_task_then_its_updates() -> None:
    async def works(run: TaskRun) -> str:
        await run.status("half way")
        return "done"

    door = make_door(works)
    async with client_for(door.app) as client:
        response = await client.post("/", json={"jsonrpc": "2.0", "id": "s", "method":
                                                "SendStreamingMessage",
                                                "params": send_params("go")})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ")]
    results = [event["result"] for event in events]
    assert all(event["id"] == "s" for event in events)
    assert "task" in results[0]
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    kinds = [next(iter(result)) for result in results]
    assert kinds.count("artifactUpdate") == 1


# --- visibility through the endpoint -----------------------------------------------


async def test_every_refusal_for_another_credentials_task_is_the_same_not_found() -> None:
    agent = Held()
    door = make_door(agent, gate=GateConfig(concurrency=4))
    app = shimmed(door)
    async with client_for(app, "planner") as planner, \
            client_for(app, "reviewer") as reviewer, client_for(app, "operator") as operator:
        mine = (await rpc(planner, "SendMessage", send_params("p", immediately=True)))
        task_id = mine["result"]["task"]["id"]
        answers = [
            await rpc(reviewer, "GetTask", {"id": task_id}),
            await rpc(reviewer, "CancelTask", {"id": task_id}),
            await rpc(reviewer, "SubscribeToTask", {"id": task_id}),
            await rpc(reviewer, "SendMessage", {"message": user_message("x", taskId=task_id)}),
            await rpc(reviewer, "GetTask", {"id": "no-such-task"}),
            await rpc(planner, "GetTask", {"id": "no-such-task"}),
        ]
        reviewer_list = await rpc(reviewer, "ListTasks")
        operator_view = await rpc(operator, "GetTask", {"id": task_id})
        own_view = await rpc(planner, "GetTask", {"id": task_id})
        agent.release.set()
        await door.result(task_id)
    errors = [answer["error"] for answer in answers]
    assert all(error == errors[0] for error in errors), errors
    assert errors[0]["code"] == -32001 and errors[0]["message"] == "Task not found"
    assert reviewer_list["result"]["tasks"] == [] and reviewer_list["result"]["totalSize"] == 0
    assert operator_view["result"]["id"] == task_id == own_view["result"]["id"]


# --- murmur methods ----------------------------------------------------------------


async def test_stop_session_is_for_the_operator_only() -> None:
    door = make_door(echo)
    app = shimmed(door)
    async with client_for(app, "planner") as planner, client_for(app, "ci") as ci:
        refused = [await rpc(planner, "murmur.StopSession"), await rpc(ci, "murmur.StopSession"),
                   await rpc(planner, "murmur.WatchSession")]
    assert all(answer["error"]["code"] == -32601 for answer in refused)
    await asyncio.sleep(0.01)
    assert not door.stop_requested.is_set()
    async with client_for(app, "operator") as operator:
        stopped = await rpc(operator, "murmur.StopSession")
    assert stopped["result"] == {"stopping": True}
    await asyncio.wait_for(door.stop_requested.wait(), 5)
    assert door.stop_reason == "stop_session"


async def test_a_public_door_serves_stop_session_to_its_public_callers() -> None:
    door = make_door(echo)
    reasons: list[str] = []
    door.on_stop(reasons.append)
    async with client_for(door.app) as client:
        body = await rpc(client, "murmur.StopSession")
    await asyncio.wait_for(door.stop_requested.wait(), 5)
    assert body["result"] == {"stopping": True} and reasons == ["stop_session"]


# --- resources/files ---------------------------------------------------------------


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    out = tmp_path / "records" / "out"
    (out / "sub").mkdir(parents=True)
    (out / "result.txt").write_text("the result\n")
    (out / "sub" / "data.json").write_text('{"a": 1}')
    (tmp_path / "records" / "operator.token").write_text("secret-operator-token")
    (tmp_path / "outside.txt").write_text("outside")
    os.symlink(tmp_path / "outside.txt", out / "escape.txt")
    os.symlink(tmp_path / "records", out / "up")
    return out


async def test_files_under_out_are_served_to_the_operator(out_dir: Path) -> None:
    door = make_door(echo, out_dir=out_dir)
    async with client_for(shimmed(door), "operator") as client:
        result = await client.get("/resources/files/result.txt")
        nested = await client.get("/resources/files/sub/data.json")
        head = await client.head("/resources/files/result.txt")
    assert result.status_code == 200 and result.text == "the result\n"
    assert result.headers["content-type"].startswith("text/plain")
    assert nested.json() == {"a": 1}
    assert head.status_code == 200 and head.headers["content-length"] == "11"


async def raw_get(app: Any, path: str) -> tuple[int, bytes]:
    """GET ``path`` exactly as a server would hand it over (no client normalisation)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": b"", "server": ("127.0.0.1", 8000),
             "client": ("127.0.0.1", 5000),
             "headers": [(b"host", b"127.0.0.1:8000"), (b"x-test-caller", b"operator")]}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], body


@pytest.mark.parametrize("path", [
    "/resources/files/../operator.token", "/resources/files/sub/../../operator.token",
    "/resources/files/./result.txt", "/resources/files/escape.txt",
    "/resources/files/up/operator.token", "/resources/files/sub",
    "/resources/files/", "/resources/files/missing.txt", "/resources/files//etc/passwd",
    "/resources/files/sub/../result.txt", "/resources/files/%2e%2e/operator.token",
    "/resources/files/result.txt\\..\\..", "/resources/files/result.txt\x00",
])
async def test_path_traversal_and_symlink_escapes_from_out_are_not_found(
        out_dir: Path, path: str) -> None:
    door = make_door(echo, out_dir=out_dir)
    status, body = await raw_get(shimmed(door), path)
    assert status == 404, path
    assert b"secret" not in body and b"outside" not in body


async def test_the_raw_request_helper_reaches_a_real_file(out_dir: Path) -> None:
    door = make_door(echo, out_dir=out_dir)
    assert await raw_get(shimmed(door), "/resources/files/sub/data.json") == (200, b'{"a": 1}')


async def test_files_are_not_served_to_a_member(out_dir: Path) -> None:
    door = make_door(echo, out_dir=out_dir)
    async with client_for(shimmed(door), "planner") as client:
        response = await client.get("/resources/files/result.txt")
    assert response.status_code == 404


# --- the in-process task API (mur run --task) ---------------------------------------


async def test_a_task_submitted_in_process_is_a_task_on_the_door() -> None:
    agent = Held()
    door = make_door(agent)
    task_id = door.submit("the formation's task")
    async with client_for(door.app) as client:
        listed = await rpc(client, "ListTasks")
        assert [task["id"] for task in listed["result"]["tasks"]] == [task_id]
        cancelled = await rpc(client, "CancelTask", {"id": task_id})
    assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    final = await asyncio.wait_for(door.result(task_id), 5)
    assert final["status"]["state"] == "TASK_STATE_CANCELED"
    assert door.task(task_id)["history"][0]["parts"] == [{"text": "the formation's task"}]


async def test_submit_goes_through_the_gate() -> None:
    door = make_door(echo, gate=GateConfig(task_acceptance="single"))
    first = door.submit("one")
    await door.result(first)
    with pytest.raises(RpcError) as busy:
        door.submit("two")
    assert busy.value.code == -32050


async def test_after_task_exit_asks_the_session_to_stop() -> None:
    door = make_door(echo, gate=GateConfig(task_acceptance="single", after_task="exit"))
    task_id = door.submit("only")
    final = await door.result(task_id)
    await asyncio.wait_for(door.stop_requested.wait(), 5)
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert door.stop_reason == "after_task"


async def test_wind_down_ends_every_task() -> None:
    agent = Held()
    door = make_door(agent, gate=GateConfig(queue_depth=1))
    running, queued = door.submit("r"), door.submit("q")
    ended: list[str] = []
    door.on_task_end(lambda task: ended.append(task["status"]["state"]))
    await asyncio.sleep(0)
    assert door.wind_down() == (1, 1)
    await asyncio.wait_for(door.drained(), 5)
    assert door.task(running)["status"]["state"] == "TASK_STATE_CANCELED"
    assert door.task(queued)["status"]["state"] == "TASK_STATE_REJECTED"
    assert sorted(ended) == ["TASK_STATE_CANCELED", "TASK_STATE_REJECTED"]
