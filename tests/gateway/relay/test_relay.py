"""The relay in-process: a gateway member's door (DoorAuth, then the relay) in front of an
a2a-sdk upstream served in the test's loop (tests/support/upstream.py), called through
httpx.ASGITransport. docs/gateway.md, in its order: every method relays with the
right headers, ownership, the gate, push configs, the trace, failures, wind-down, and
DoorAuth's order in front. The card is in test_relay_card.py, streams in
test_relay_streams.py."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Callable
from typing import Any

import httpx

from gateway.door.app import build_door
from gateway.door.tasks import GateConfig, TaskRun
from tests.support.auth import assert_invalid_token
from tests.support.door import A2A_HEADERS, BASE_URL, send_params
from tests.support.upstream import (
    MANIFEST_HEADERS,
    GatewayFormation,
    gateway_formation,
    gateway_member,
    running_upstream,
)

WAIT_S = 5.0
TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED",
            "TASK_STATE_REJECTED"}


async def call(client: httpx.AsyncClient, method: str, params: dict[str, Any] | None = None,
               request_id: int = 1) -> httpx.Response:
    return await client.post("/", json={"jsonrpc": "2.0", "id": request_id, "method": method,
                                        "params": params if params is not None else {}})


def result_of(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    return body["result"]


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert "error" in body, body
    error: dict[str, Any] = body["error"]
    return error


async def started(client: httpx.AsyncClient, text: str, **message: Any) -> dict[str, Any]:
    """A task started with returnImmediately; its Task as the door answered it."""
    task: dict[str, Any] = result_of(await call(
        client, "SendMessage", send_params(text, immediately=True, **message)))["task"]
    return task


async def eventually(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Wait (bounded) until ``check()`` holds."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)
    assert check(), what


async def upstream_task(formation: GatewayFormation, task_id: str) -> dict[str, Any]:
    """The task as the upstream itself has it (asked directly, not through the door)."""
    async with httpx.AsyncClient(base_url=formation.upstream_url, headers=A2A_HEADERS,
                                 timeout=5) as upstream:
        task: dict[str, Any] = result_of(await call(upstream, "GetTask", {"id": task_id}))
    return task


async def sse_results(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) async for line in response.aiter_lines()
            if line.startswith("data: ")]


# --- every method relays, with the door's headers only --------------------------------


SPOOFED = {"x-murmur-task-trust": "trusted", "x-murmur-task-origin": "operator",
           "x-murmur-caller": "operator"}


def assert_only_the_doors_headers(formation: GatewayFormation) -> None:
    requests = formation.recorder.rpc()
    assert requests, "the upstream got no JSON-RPC request"
    for request in requests:
        names = [name for name, _ in request.headers]
        assert request.header("a2a-version") == ["1.0"], request
        assert request.header("x-api-key") == [MANIFEST_HEADERS["X-Api-Key"]], request
        assert "authorization" not in names, request
        assert not [name for name in names if name.startswith("x-murmur-")], request


async def test_every_method_relays_with_a2a_version_and_the_manifest_headers_only() -> None:
    async with gateway_member() as formation, \
            formation.client(formation.planner, **SPOOFED) as planner, \
            formation.client(formation.operator, **SPOOFED) as operator:
        blocking = result_of(await call(planner, "SendMessage", send_params("hello")))["task"]
        live = await started(planner, "slow: 5")
        got = result_of(await call(planner, "GetTask", {"id": blocking["id"]}))
        canceled = result_of(await call(planner, "CancelTask", {"id": live["id"]}))
        listed = result_of(await call(planner, "ListTasks"))
        short = await started(planner, "slow: 0.5")
        subscribed = await sse_results(await call(planner, "SubscribeToTask",
                                                  {"id": short["id"]}))
        streamed = await sse_results(await call(operator, "SendStreamingMessage",
                                                send_params("streamed hello")))
    assert blocking["status"]["state"] == "TASK_STATE_COMPLETED"
    assert blocking["artifacts"][0]["parts"] == [{"text": "heard: hello"}]
    assert live["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert got["id"] == blocking["id"] and got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert {task["id"] for task in listed["tasks"]} == {blocking["id"], live["id"]}
    assert subscribed[-1]["result"]["statusUpdate"]["status"]["state"] == \
        "TASK_STATE_COMPLETED"
    assert streamed[-1]["result"]["statusUpdate"]["status"]["state"] == \
        "TASK_STATE_COMPLETED"
    methods = set(formation.recorder.rpc_methods())
    assert methods >= {"SendMessage", "GetTask", "CancelTask", "SubscribeToTask",
                       "SendStreamingMessage"}
    assert_only_the_doors_headers(formation)


async def test_requests_reach_the_upstream_with_the_doors_own_request_ids() -> None:
    async with gateway_member() as formation, \
            formation.client(formation.planner) as planner:
        for _ in range(2):
            await call(planner, "SendMessage", send_params("hello"), request_id=7)
    requests = formation.recorder.rpc("SendMessage")
    assert len(requests) == 2
    assert all(request.path == "/" for request in requests)
    ids = [request.rpc_id for request in requests]
    assert 7 not in ids and len(set(ids)) == 2, ids


# --- ownership --------------------------------------------------------------------------


UNKNOWN_ID = "0" * 8 + "-unknown-" + os.urandom(4).hex()


def probes(task_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every way to reach a task by its id. The GetTask carries a marker (historyLength 7)
    that the door's own following never sends, so the recorder can tell it apart."""
    return [("GetTask", {"id": task_id, "historyLength": 7}),
            ("CancelTask", {"id": task_id}),
            ("SubscribeToTask", {"id": task_id}),
            ("SendMessage", send_params("more", taskId=task_id))]


def reached_the_upstream(formation: GatewayFormation, task_id: str) -> list[str]:
    """The probes of ``task_id`` the upstream got (the door's own follower excepted)."""
    return [str(request.rpc_method) for request in formation.recorder.asked_about(task_id)
            if not (request.rpc_method == "GetTask"
                    and request.params.get("historyLength") != 7)]


async def test_attack_cross_caller_task_id_gets_the_unknown_id_answer_byte_for_byte() -> None:
    async with gateway_member() as formation, \
            formation.client(formation.planner) as planner, \
            formation.client(formation.reviewer) as reviewer:
        task = await started(planner, "input: tell me")
        await eventually(lambda: formation.relay.known(task["id"]) is not None,
                         "the door knows the planner's task")
        for method, params in probes(task["id"]):
            theirs = await call(reviewer, method, params, request_id=41)
            unknown_params = json.loads(json.dumps(params).replace(task["id"], UNKNOWN_ID))
            unknown = await call(reviewer, method, unknown_params, request_id=41)
            assert theirs.status_code == unknown.status_code == 200
            assert theirs.content == unknown.content, method
            assert error_of(theirs)["code"] == -32001
        assert reached_the_upstream(formation, task["id"]) == []
        assert reached_the_upstream(formation, UNKNOWN_ID) == []
        # The owner still reaches it, and its follow-up completes it.
        follow_up = result_of(await call(planner, "SendMessage",
                                         send_params("the rest", taskId=task["id"])))
    assert reached_the_upstream(formation, task["id"]) == ["SendMessage"]
    assert follow_up["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert follow_up["task"]["artifacts"][-1]["parts"] == [{"text": "got: the rest"}]


async def test_the_operator_reaches_a_members_task() -> None:
    async with gateway_member() as formation, \
            formation.client(formation.planner) as planner, \
            formation.client(formation.operator) as operator:
        task = await started(planner, "input: tell me")
        await eventually(lambda: formation.relay.known(task["id"]) is not None,
                         "the door knows the planner's task")
        got = result_of(await call(operator, "GetTask", {"id": task["id"], "historyLength": 7}))
        canceled = result_of(await call(operator, "CancelTask", {"id": task["id"]}))
    assert got["id"] == task["id"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert reached_the_upstream(formation, task["id"]) == ["GetTask", "CancelTask"]


async def list_all(client: httpx.AsyncClient, page_size: int) -> tuple[list[str], int]:
    """Every task id ListTasks gives, page by page (bounded); and how many pages."""
    ids: list[str] = []
    token = ""
    for pages in range(1, 20):
        params: dict[str, Any] = {"pageSize": page_size}
        if token:
            params["pageToken"] = token
        page = result_of(await call(client, "ListTasks", params))
        assert len(page["tasks"]) <= page_size
        ids += [task["id"] for task in page["tasks"]]
        token = page["nextPageToken"]
        if not token:
            return ids, pages
    raise AssertionError("ListTasks paged on and on")


async def test_list_tasks_lists_only_the_callers_own_and_pages_walk_them_once() -> None:
    async with gateway_member() as formation, \
            formation.client(formation.planner) as planner, \
            formation.client(formation.reviewer) as reviewer, \
            formation.client(formation.operator) as operator:
        mine = [result_of(await call(planner, "SendMessage", send_params(f"p{n}")))["task"]["id"]
                for n in range(5)]
        theirs = [result_of(await call(reviewer, "SendMessage",
                                       send_params(f"r{n}")))["task"]["id"] for n in range(2)]
        whole = result_of(await call(planner, "ListTasks"))
        planner_pages = await list_all(planner, 2)
        reviewer_pages = await list_all(reviewer, 1)
        operator_pages = await list_all(operator, 3)
    assert {task["id"] for task in whole["tasks"]} == set(mine)
    assert whole["totalSize"] == 5 and whole["nextPageToken"] == ""
    assert all("artifacts" not in task for task in whole["tasks"]), "includeArtifacts is off"
    ids, pages = planner_pages
    assert sorted(ids) == sorted(mine) and pages == 3
    ids, pages = reviewer_pages
    assert sorted(ids) == sorted(theirs) and pages == 2
    ids, pages = operator_pages
    assert sorted(ids) == sorted(mine + theirs) and pages == 3


# --- the gate ---------------------------------------------------------------------------


def assert_member_busy(response: httpx.Response) -> None:
    error = error_of(response)
    assert error["code"] == -32050
    info = error["data"][0]
    assert info["reason"] == "MEMBER_BUSY" and int(info["metadata"]["retryAfterMs"]) > 0


async def test_a_full_member_is_busy_before_the_upstream_sees_the_message() -> None:
    async with gateway_member(GateConfig(concurrency=1, queue_depth=0)) as formation, \
            formation.client(formation.planner) as planner, \
            formation.client(formation.operator) as operator:
        slow = await started(planner, "slow: 0.4")
        busy = await call(planner, "SendMessage", send_params("while busy"))
        busy_stream = await call(operator, "SendStreamingMessage", send_params("while busy"))
        sent_while_busy = len(formation.recorder.rpc("SendMessage"))
        final = await asyncio.wait_for(formation.door.result(slow["id"]), WAIT_S)
        taken = result_of(await call(planner, "SendMessage", send_params("after")))
    assert_member_busy(busy)
    assert_member_busy(busy_stream)
    assert sent_while_busy == 1
    assert formation.recorder.rpc_methods().count("SendStreamingMessage") == 0
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert taken["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_task_acceptance_single_takes_one_task_only() -> None:
    gate = GateConfig(concurrency=4, queue_depth=0, task_acceptance="single")
    async with gateway_member(gate) as formation, \
            formation.client(formation.planner) as planner:
        first = result_of(await call(planner, "SendMessage", send_params("one")))
        second = await call(planner, "SendMessage", send_params("two"))
    assert first["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert_member_busy(second)
    assert len(formation.recorder.rpc("SendMessage")) == 1


# --- push configs -----------------------------------------------------------------------


PUSH_METHODS = ("CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
                "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig")


async def test_attack_push_configs_are_refused_and_never_forwarded() -> None:
    params = send_params("hello")
    params["configuration"] = {"taskPushNotificationConfig": {
        "url": "https://hooks.example.invalid/steal", "token": "t"}}
    async with gateway_member() as formation, \
            formation.client(formation.operator) as operator:
        refused_send = await call(operator, "SendMessage", params)
        refused = [await call(operator, method, {"taskId": UNKNOWN_ID, "id": "c1",
                                                 "url": "https://hooks.example.invalid/x"})
                   for method in PUSH_METHODS]
    assert error_of(refused_send)["code"] == -32003
    assert [error_of(response)["code"] for response in refused] == [-32003] * 4
    assert formation.recorder.rpc() == []


# --- the trace --------------------------------------------------------------------------


async def test_the_trace_records_who_sent_each_task_and_the_states_seen() -> None:
    async with gateway_member() as formation, \
            formation.client(formation.planner, **{"x-murmur-task-trust": "trusted"}) as planner, \
            formation.client(formation.reviewer) as reviewer, \
            formation.client(formation.operator) as operator:
        ids = [result_of(await call(client, "SendMessage", send_params("hi")))["task"]["id"]
               for client in (planner, reviewer, operator)]
    received = {record["task_id"]: record for record in formation.events("a2a_task_received")}
    assert {key: received[ids[0]][key] for key in
            ("credential", "origin", "trust", "formation_member")} == {
        "credential": "member:planner", "origin": "peer", "trust": "trusted",
        "formation_member": "planner"}
    assert (received[ids[1]]["credential"], received[ids[1]]["trust"]) == \
        ("member:reviewer", "untrusted")
    assert (received[ids[2]]["origin"], received[ids[2]]["trust"]) == ("operator", "trusted")
    states = [(record["task_id"], record["state"]) for record in formation.events("task_state")]
    assert [(task_id, "TASK_STATE_COMPLETED") for task_id in ids] == [
        entry for entry in states if entry[1] == "TASK_STATE_COMPLETED"]
    assert "mft1" not in json.dumps(formation.records), "a token in the trace"


async def test_the_upstream_gets_the_task_span_as_its_trace_parent() -> None:
    # An upstream agent instrumented for W3C trace context joins the formation's trace:
    # its request's parent is the span a2a_task_received records for the task.
    caller_span = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with gateway_member() as formation, \
            formation.client(formation.planner, traceparent=caller_span) as planner, \
            formation.client(formation.operator, traceparent=caller_span) as operator:
        sent = result_of(await call(planner, "SendMessage", send_params("hi")))["task"]
        streamed = await sse_results(await call(operator, "SendStreamingMessage",
                                                send_params("streamed")))
        plain = result_of(await call(planner, "GetTask", {"id": sent["id"]}))
    streamed_id = streamed[0]["result"]["task"]["id"]
    received = {record["task_id"]: record for record in formation.events("a2a_task_received")}
    parents = [request.header("traceparent") for request in formation.recorder.rpc()
               if request.rpc_method in ("SendMessage", "SendStreamingMessage")]
    assert len(parents) == 2
    for task_id, [parent] in zip((sent["id"], streamed_id), parents, strict=True):
        record = received[task_id]
        assert record["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert record["parent_span_id"] == "00f067aa0ba902b7"
        assert parent == f"00-{record['trace_id']}-{record['span_id']}-01"
    assert plain["id"] == sent["id"]
    polls = [request.header("traceparent") for request in formation.recorder.rpc("GetTask")]
    assert polls and all(header == [] for header in polls)   # only new tasks carry one


async def test_a_task_nobody_asks_about_again_still_gets_its_final_state_record() -> None:
    async with gateway_member() as formation, \
            formation.client(formation.planner) as planner:
        task = await started(planner, "slow: 0.5")

        def completed() -> bool:
            return ("TASK_STATE_COMPLETED", task["id"]) in {
                (record["state"], record["task_id"]) for record in formation.events("task_state")}

        await eventually(completed, "the follower saw the task complete")
        final = await asyncio.wait_for(formation.door.result(task["id"]), WAIT_S)
    states = [record["state"] for record in formation.events("task_state")
              if record["task_id"] == task["id"]]
    assert states[0] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert states[-1] == "TASK_STATE_COMPLETED" and states.count("TASK_STATE_COMPLETED") == 1
    assert final["status"]["state"] == "TASK_STATE_COMPLETED"
    assert final["artifacts"][0]["parts"] == [{"text": "worked 0.5 s"}]
    follower_calls = [request for request in formation.recorder.asked_about(task["id"])
                      if request.rpc_method == "GetTask"]
    assert follower_calls, "the door followed the task with GetTask"


# --- failures ---------------------------------------------------------------------------


def assert_names_the_member_not_the_address(error: dict[str, Any], port: int) -> None:
    assert error["code"] == -32603
    text = json.dumps(error)
    assert "coder" in error["message"]
    assert "127.0.0.1" not in text and "localhost" not in text
    assert str(port) not in text


async def test_a_stopped_upstream_is_internal_error_naming_the_member_only() -> None:
    async with running_upstream() as (upstream_url, recorder):
        formation = await gateway_formation(upstream_url, recorder)
        async with formation.client(formation.planner) as planner:
            assert result_of(await call(planner, "SendMessage", send_params("before")))
    port = int(upstream_url.rsplit(":", 1)[1])
    try:
        async with formation.client(formation.planner) as planner, \
                formation.client(formation.operator) as operator:
            sent = await call(planner, "SendMessage", send_params("after"))
            got = await call(operator, "GetTask", {"id": UNKNOWN_ID})
            streamed = await call(operator, "SendStreamingMessage", send_params("after"))
    finally:
        await formation.door.aclose()
    for response in (sent, got, streamed):
        assert_names_the_member_not_the_address(error_of(response), port)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_upstream_nothing_listens_for_is_internal_error_naming_the_member() -> None:
    port = free_port()
    async with running_upstream() as (upstream_url, recorder):
        formation = await gateway_formation(upstream_url, recorder,
                                            rpc_url=f"http://127.0.0.1:{port}/")
        try:
            async with formation.client(formation.planner) as planner:
                sent = await call(planner, "SendMessage", send_params("hello"))
                busy_after = formation.door.held
        finally:
            await formation.door.aclose()
    assert_names_the_member_not_the_address(error_of(sent), port)
    assert busy_after == 0, "a failed send gives its place at the gate back"


async def test_an_upstream_json_rpc_error_passes_through_with_its_code() -> None:
    async with gateway_member() as formation, \
            formation.client(formation.operator) as operator, \
            httpx.AsyncClient(base_url=formation.upstream_url, headers=A2A_HEADERS,
                              timeout=5) as upstream:
        direct = error_of(await call(upstream, "GetTask", {"id": UNKNOWN_ID}))
        relayed = error_of(await call(operator, "GetTask", {"id": UNKNOWN_ID}))
    assert direct["code"] == -32001
    assert relayed == direct


# --- wind-down ---------------------------------------------------------------------------


async def test_wind_down_cancels_the_live_upstream_tasks_and_drains() -> None:
    async with gateway_member(GateConfig(concurrency=2, queue_depth=0)) as formation, \
            formation.client(formation.planner) as planner:
        tasks = [await started(planner, "slow: 10") for _ in range(2)]
        cancelled, refused = formation.door.wind_down()
        await asyncio.wait_for(formation.door.drained(), WAIT_S)
        upstream = [await upstream_task(formation, task["id"]) for task in tasks]
        after = await call(planner, "SendMessage", send_params("too late"))
    assert (cancelled, refused) == (2, 0)
    canceled_ids = {request.params["id"] for request in formation.recorder.rpc("CancelTask")}
    assert canceled_ids == {task["id"] for task in tasks}
    assert [task["status"]["state"] for task in upstream] == ["TASK_STATE_CANCELED"] * 2
    assert formation.door.held == 0
    assert_member_busy(after)


# --- DoorAuth in front of the relay -----------------------------------------------------


async def local_agent(run: TaskRun) -> str:
    return f"local {run.text}"


async def same_answers(formation: GatewayFormation, token: str | None, method: str,
                       params: dict[str, Any]) -> tuple[httpx.Response, httpx.Response]:
    """The same request to the relay door and to a local door with the same policy."""
    local = build_door(local_agent, formation.door.settings, policy=formation.policy)
    headers = dict(A2A_HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    answers = []
    for door in (formation.door, local):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app),
                                     base_url=BASE_URL,
                                     headers=headers, timeout=5) as client:
            answers.append(await call(client, method, params))
    return answers[0], answers[1]


def assert_same(relay: httpx.Response, local: httpx.Response) -> None:
    assert (relay.status_code, relay.content, relay.headers.get("www-authenticate")) == \
        (local.status_code, local.content, local.headers.get("www-authenticate"))


async def test_attack_no_credential_and_bad_tokens_are_401_before_the_relay() -> None:
    async with gateway_member() as formation:
        missing = await same_answers(formation, None, "SendMessage", send_params("x"))
        bad = await same_answers(formation, "mft1.forged.token", "SendMessage",
                                 send_params("x"))
        garbage = await same_answers(formation, "not-a-token", "GetTask", {"id": UNKNOWN_ID})
    assert missing[0].status_code == 401 and missing[0].json()["error"] == "unauthenticated"
    assert_same(*missing)
    for relay, local in (bad, garbage):
        assert_invalid_token(relay)
        assert_same(relay, local)
    assert formation.recorder.rpc() == []


async def test_attack_a_token_for_another_member_is_403_not_permitted() -> None:
    async with gateway_member() as formation:
        relay, local = await same_answers(formation, formation.planner_to_reviewer,
                                          "SendMessage", send_params("x"))
    assert relay.status_code == 403 and relay.json()["error"] == "not_permitted"
    assert "planner" in relay.json()["message"]
    assert_same(relay, local)
    assert formation.recorder.rpc() == []


async def test_attack_get_extended_agent_card_is_answered_as_a_local_door_answers_it() -> None:
    async with gateway_member() as formation:
        member = await same_answers(formation, formation.planner, "GetExtendedAgentCard", {})
        operator = await same_answers(formation, formation.operator,
                                      "GetExtendedAgentCard", {})
        nobody = await same_answers(formation, None, "GetExtendedAgentCard", {})
    # A formation token is refused it (none of its five scopes), as a local door refuses
    # it; anyone else gets -32004: no agent.extended_skills, extendedAgentCard false.
    assert member[0].status_code == 403
    assert member[0].json()["error"] == "insufficient_scope"
    assert_same(*member)
    assert error_of(operator[0])["code"] == -32004
    assert_same(*operator)
    assert nobody[0].status_code == 401 and nobody[0].json()["error"] == "unauthenticated"
    assert_same(*nobody)
    assert formation.recorder.rpc() == [], "never asked of the upstream"

