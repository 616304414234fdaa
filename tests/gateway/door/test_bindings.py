"""One scenario table, run on both A2A bindings of the door (JSON-RPC and HTTP+JSON) from
one test definition: each scenario's outcome must be the table's on either binding, and
the two bindings' whole transcripts (every answer, ids and times aside) must be equal,
so the bindings cannot drift apart. Then a caller's visibility and DoorAuth's refusals
through the real DoorAuth, alike on both bindings."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from gateway.door.app import Door, DoorSettings, build_door
from gateway.door.tasks import GateConfig
from tests.support.bindings import (
    BINDINGS,
    Agent,
    Binding,
    Events,
    HttpJson,
    JsonRpc,
    Outcome,
    clients,
    formation,
    scrub,
    settle,
    subscribed,
)
from tests.support.door import BASE_URL, card_info

COMPLETED = "TASK_STATE_COMPLETED"
WORKING = "TASK_STATE_WORKING"
CANCELED = "TASK_STATE_CANCELED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
NOT_FOUND = "TASK_NOT_FOUND"


@dataclass
class Env:
    door: Door
    agent: Agent


def state(outcome: Outcome) -> str:
    """A task's state (from a Task, a ``{"task"}`` answer or a status update), or the
    error reason."""
    if isinstance(outcome, str):
        return outcome
    if "statusUpdate" in outcome:
        return str(outcome["statusUpdate"]["status"]["state"])
    task = outcome.get("task", outcome)
    return str(task["status"]["state"])


def answer_of(outcome: Outcome) -> list[str]:
    """The texts of a task's artifacts."""
    assert isinstance(outcome, dict), outcome
    task = outcome.get("task", outcome)
    return [part["text"] for artifact in task.get("artifacts", ()) for part in artifact["parts"]]


def kinds(events: Events) -> list[str] | str:
    if isinstance(events, str):
        return events
    return [event if isinstance(event, str) else next(iter(event)) for event in events]


def event_task(event: Outcome) -> str:
    """The task a StreamResponse is about (an error reason as it is)."""
    if isinstance(event, str):
        return event
    if "task" in event:
        return str(event["task"]["id"])
    return str(next(iter(event.values()))["taskId"])


def task_id_of(outcome: Outcome) -> str:
    assert isinstance(outcome, dict) and "task" in outcome, outcome
    return str(outcome["task"]["id"])


# --- the scenarios -----------------------------------------------------------------


async def send_blocking(b: Binding, env: Env) -> Any:
    sent = await b.send("hello")
    assert isinstance(sent, dict)
    return {"state": state(sent), "answer": answer_of(sent),
            "history": [message["role"] for message in sent["task"]["history"]]}


async def send_immediately_then_get_until_done(b: Binding, env: Env) -> Any:
    started = await b.send("hold", immediately=True)
    task_id = task_id_of(started)
    polled = await b.get(task_id)
    env.agent.release.set()
    done = await b.until_done(task_id)
    assert isinstance(done, dict)
    return {"started": state(started), "polled": state(polled), "done": state(done),
            "answer": answer_of(done), "same task": done["id"] == task_id}


async def list_in_pages(b: Binding, env: Env) -> Any:
    sent = [task_id_of(await b.send(text)) for text in ("one", "two", "three")]
    first = await b.list(2)
    assert isinstance(first, dict)
    second = await b.list(2, first["nextPageToken"])
    assert isinstance(second, dict)
    seen = [task["id"] for page in (first, second) for task in page["tasks"]]
    return {"page sizes": [len(first["tasks"]), len(second["tasks"])],
            "totals": [first["totalSize"], second["totalSize"]],
            "a token, then none": [bool(first["nextPageToken"]), second["nextPageToken"]],
            "every task once": len(seen) == len(set(seen)) == 3 and set(seen) == set(sent),
            "newest first": seen == sent[::-1]}


async def subscribe_to_a_live_task(b: Binding, env: Env) -> Any:
    task_id = task_id_of(await b.send("hold", immediately=True))
    following = asyncio.create_task(b.subscribe(task_id))
    await subscribed(env.door, task_id)
    env.agent.release.set()
    events = await asyncio.wait_for(following, 5)
    assert isinstance(events, list)
    return {"kinds": kinds(events), "first": state(events[0]), "last": state(events[-1]),
            "all of this task": {event_task(event) for event in events} == {task_id}}


async def stream_a_message(b: Binding, env: Env) -> Any:
    events = await b.stream("hello")
    assert isinstance(events, list)
    return {"kinds": kinds(events), "first": state(events[0]), "last": state(events[-1]),
            "artifact": events[1]["artifactUpdate"]["artifact"]["parts"]
            if isinstance(events[1], dict) else events[1]}


async def cancel_a_running_task(b: Binding, env: Env) -> Any:
    task_id = task_id_of(await b.send("hold", immediately=True))
    canceled = await b.cancel(task_id)
    return {"canceled": state(canceled), "then": state(await b.get(task_id))}


async def cancel_an_ended_task(b: Binding, env: Env) -> Any:
    task_id = task_id_of(await b.send("hello"))
    return {"cancel": await b.cancel(task_id), "then": state(await b.get(task_id))}


async def reach_an_unknown_task(b: Binding, env: Env) -> Any:
    return {"get": await b.get("no-such-task"), "cancel": await b.cancel("no-such-task"),
            "subscribe": await b.subscribe("no-such-task"),
            "follow-up": await b.send("x", task_id="no-such-task")}


async def input_required_then_resume(b: Binding, env: Env) -> Any:
    asked = await b.send("ask")
    assert isinstance(asked, dict)
    resumed = await b.send("rust", task_id=task_id_of(asked))
    assert isinstance(resumed, dict)
    return {"asked": state(asked),
            "question": asked["task"]["status"]["message"]["parts"],
            "resumed": state(resumed), "answer": answer_of(resumed),
            "same task": task_id_of(resumed) == task_id_of(asked)}


async def stream_until_input_is_required_then_resume(b: Binding, env: Env) -> Any:
    asked = await b.stream("ask")
    assert isinstance(asked, list) and isinstance(asked[0], dict)
    resumed = await b.stream("rust", task_id=event_task(asked[0]))
    assert isinstance(resumed, list)
    return {"asked": kinds(asked), "stops at": state(asked[-1]), "resumed": kinds(resumed),
            "ends": state(resumed[-1]),
            "one task": {event_task(event) for event in asked + resumed} == {
                event_task(asked[0])}}


async def reply_with_a_message_alone(b: Binding, env: Env) -> Any:
    answer = await b.send("reply")
    assert isinstance(answer, dict)
    return {"kinds": sorted(answer), "role": answer["message"]["role"],
            "parts": answer["message"]["parts"], "tasks kept": await total(b)}


async def reach_an_ended_task(b: Binding, env: Env) -> Any:
    task_id = task_id_of(await b.send("hello"))
    return {"subscribe": await b.subscribe(task_id),
            "follow-up": await b.send("more", task_id=task_id)}


async def call_without_a_version(b: Binding, env: Env) -> Any:
    bare = b.versionless()
    return {"send": await bare.send("x"), "stream": await bare.stream("x"),
            "list": await bare.list(), "get unknown": await bare.get("no-such-task"),
            "cancel unknown": await bare.cancel("no-such-task"),
            "0.3 version": await b.with_headers(**{"A2A-Version": "0.3"}).list(),
            "tasks made": await total(b)}


async def configure_push_notifications(b: Binding, env: Env) -> Any:
    task_id = task_id_of(await b.send("hello"))
    return {"create": await b.create_push_config(task_id),
            "get": await b.get_push_config(task_id, "config-1"),
            "send with one": await b.send(
                "x", taskPushNotificationConfig={"url": "https://hook.example/a2a"}),
            "tasks made": await total(b)}


async def send_invalid_params(b: Binding, env: Env) -> Any:
    return {"negative historyLength": await b.get("t-1", history=-1),
            "pageSize 0": await b.list(0), "pageSize 101": await b.list(101),
            "foreign pageToken": await b.list(page_token="not-a-token"),
            "statusTimestampAfter": await b.list(statusTimestampAfter="yesterday"),
            "no messageId": await b.send_raw(
                {"message": {"role": "ROLE_USER", "parts": [{"text": "x"}]}}),
            "no message": await b.send_raw({}),
            "tasks made": await total(b)}


async def send_to_a_busy_member(b: Binding, env: Env) -> Any:
    held = task_id_of(await b.send("hold", immediately=True))
    busy = {"send": await b.send("x"), "stream": await b.stream("x")}
    env.agent.release.set()
    await b.until_done(held)
    return {**busy, "after": state(await b.send("later")), "tasks made": await total(b)}


async def total(b: Binding) -> Any:
    listed = await b.list()
    return listed if isinstance(listed, str) else listed["totalSize"]


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Binding, Env], Awaitable[Any]]
    expected: Any
    gate: GateConfig = field(default_factory=lambda: GateConfig(concurrency=4, queue_depth=4))


SCENARIOS = [
    Scenario("send blocking", send_blocking,
             {"state": COMPLETED, "answer": ["echo: hello"], "history": ["ROLE_USER"]}),
    Scenario("send returnImmediately, get until done", send_immediately_then_get_until_done,
             {"started": WORKING, "polled": WORKING, "done": COMPLETED,
              "answer": ["released"], "same task": True}),
    Scenario("list with paging", list_in_pages,
             {"page sizes": [2, 1], "totals": [3, 3], "a token, then none": [True, ""],
              "every task once": True, "newest first": True}),
    Scenario("subscribe to a live task", subscribe_to_a_live_task,
             {"kinds": ["task", "artifactUpdate", "statusUpdate"], "first": WORKING,
              "last": COMPLETED, "all of this task": True}),
    Scenario("stream a message", stream_a_message,
             {"kinds": ["task", "artifactUpdate", "statusUpdate"], "first": WORKING,
              "last": COMPLETED, "artifact": [{"text": "echo: hello"}]}),
    Scenario("cancel a running task", cancel_a_running_task,
             {"canceled": CANCELED, "then": CANCELED}),
    Scenario("cancel an ended task", cancel_an_ended_task,
             {"cancel": "TASK_NOT_CANCELABLE", "then": COMPLETED}),
    Scenario("an unknown task", reach_an_unknown_task,
             {"get": NOT_FOUND, "cancel": NOT_FOUND, "subscribe": NOT_FOUND,
              "follow-up": NOT_FOUND}),
    Scenario("input required, then resumed", input_required_then_resume,
             {"asked": INPUT_REQUIRED, "question": [{"text": "which language?"}],
              "resumed": COMPLETED, "answer": ["written in rust"], "same task": True}),
    Scenario("stream until input is required, then resume",
             stream_until_input_is_required_then_resume,
             {"asked": ["task", "statusUpdate"], "stops at": INPUT_REQUIRED,
              "resumed": ["task", "artifactUpdate", "statusUpdate"], "ends": COMPLETED,
              "one task": True}),
    Scenario("a reply with a message alone", reply_with_a_message_alone,
             {"kinds": ["message"], "role": "ROLE_AGENT", "parts": [{"text": "replied"}],
              "tasks kept": 0}),
    Scenario("an ended task takes no stream and no message", reach_an_ended_task,
             {"subscribe": "UNSUPPORTED_OPERATION", "follow-up": "UNSUPPORTED_OPERATION"}),
    Scenario("no A2A-Version", call_without_a_version,
             {"send": "VERSION_NOT_SUPPORTED", "stream": "VERSION_NOT_SUPPORTED",
              "list": "VERSION_NOT_SUPPORTED", "get unknown": "VERSION_NOT_SUPPORTED",
              "cancel unknown": "VERSION_NOT_SUPPORTED", "0.3 version": "VERSION_NOT_SUPPORTED",
              "tasks made": 0}),
    Scenario("push notification config", configure_push_notifications,
             {"create": "PUSH_NOTIFICATION_NOT_SUPPORTED",
              "get": "PUSH_NOTIFICATION_NOT_SUPPORTED",
              "send with one": "PUSH_NOTIFICATION_NOT_SUPPORTED", "tasks made": 1}),
    Scenario("invalid params", send_invalid_params,
             {"negative historyLength": "INVALID_PARAMS", "pageSize 0": "INVALID_PARAMS",
              "pageSize 101": "INVALID_PARAMS", "foreign pageToken": "INVALID_PARAMS",
              "statusTimestampAfter": "INVALID_PARAMS", "no messageId": "INVALID_PARAMS",
              "no message": "INVALID_PARAMS", "tasks made": 0}),
    Scenario("a busy member", send_to_a_busy_member,
             {"send": "MEMBER_BUSY", "stream": "MEMBER_BUSY", "after": COMPLETED,
              "tasks made": 2},
             GateConfig(concurrency=1, queue_depth=0, retry_after_ms=1500)),
]


async def play(binding: type[Binding], scenario: Scenario) -> tuple[Any, list[Any]]:
    """Run ``scenario`` on a fresh public door over ``binding``: (facts, transcript)."""
    agent = Agent()
    door = build_door(agent, DoorSettings(card=card_info(), gate=scenario.gate))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app),
                                 base_url=BASE_URL) as client:
        b = binding(client)
        try:
            facts = await asyncio.wait_for(scenario.run(b, Env(door, agent)), 10)
        finally:
            await settle(door, agent)
    return facts, b.log


@pytest.mark.parametrize("binding", BINDINGS, ids=[b.name for b in BINDINGS])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_scenario(scenario: Scenario, binding: type[Binding]) -> None:
    facts, transcript = await play(binding, scenario)
    assert facts == scenario.expected
    assert transcript, "the scenario called the door"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_both_bindings_give_the_same_transcript(scenario: Scenario) -> None:
    (_, rpc_log), (_, rest_log) = [await play(binding, scenario) for binding in BINDINGS]
    assert scrub(rpc_log) == scrub(rest_log)


def test_scrub_keeps_equal_ids_equal_and_different_ids_apart() -> None:
    # The transcript comparison is only as good as scrub: ids it merged would hide drift.
    one = scrub([{"id": "a", "taskId": "a", "contextId": "b"}, {"id": "c", "timestamp": "t1"}])
    other = scrub([{"id": "x", "taskId": "y", "contextId": "z"}, {"id": "w", "timestamp": "t2"}])
    assert one == [{"id": "<id 1>", "taskId": "<id 1>", "contextId": "<id 2>"},
                   {"id": "<id 3>", "timestamp": "<time>"}]
    assert one != other


# --- visibility and DoorAuth through the real middleware ----------------------------


@pytest.mark.parametrize("started_on", BINDINGS, ids=[f"started on {b.name}" for b in BINDINGS])
async def test_a_members_task_is_visible_alike_on_both_bindings(
        started_on: type[Binding]) -> None:
    setup = formation()
    async with clients(setup, "planner", "reviewer", "ci", "operator") as (
            planner, reviewer, ci, operator):
        task_id = task_id_of(await started_on(planner).send("hold", immediately=True))
        ci_task = task_id_of(await started_on(ci).send("hello"))
        views: dict[str, Any] = {}
        for binding in BINDINGS:
            strangers = {}
            for name, client in (("reviewer", reviewer), ("ci", ci)):
                other = binding(client)
                listed = await other.list()
                assert isinstance(listed, dict)
                strangers[name] = {
                    "get": await other.get(task_id), "cancel": await other.cancel(task_id),
                    "subscribe": await other.subscribe(task_id),
                    "follow-up": await other.send("x", task_id=task_id),
                    "listed": sorted(task["id"] for task in listed["tasks"])}
            own, everyone = binding(planner), binding(operator)
            mine = await own.list()
            every = await everyone.list()
            assert isinstance(mine, dict) and isinstance(every, dict)
            views[binding.name] = {
                **strangers,
                "planner": {"get": state(await own.get(task_id)),
                            "get ci's": await own.get(ci_task),
                            "listed": [task["id"] for task in mine["tasks"]]},
                "operator": {"get": state(await everyone.get(task_id)),
                             "get ci's": state(await everyone.get(ci_task)),
                             "listed": sorted(task["id"] for task in every["tasks"])}}
        still = state(await started_on(operator).get(task_id))
        await settle(setup.door, setup.agent)
    assert views["JSON-RPC"] == views["HTTP+JSON"]
    view = views["HTTP+JSON"]
    refused = {"get": NOT_FOUND, "cancel": NOT_FOUND, "subscribe": NOT_FOUND,
               "follow-up": NOT_FOUND}
    assert view["reviewer"] == {**refused, "listed": []}
    assert view["ci"] == {**refused, "listed": [ci_task]}
    assert view["planner"] == {"get": WORKING, "get ci's": NOT_FOUND, "listed": [task_id]}
    assert view["operator"] == {"get": WORKING, "get ci's": COMPLETED,
                                "listed": sorted([task_id, ci_task])}
    assert still == WORKING, "no stranger's cancel reached the task"


@pytest.mark.parametrize("binding", BINDINGS, ids=[b.name for b in BINDINGS])
async def test_doorauth_refuses_alike_on_both_bindings(binding: type[Binding]) -> None:
    setup = formation()
    async with clients(setup, "reader", "planner", "planner-to-reviewer") as (
            reader, planner, wrong_door), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=setup.door.app), base_url=BASE_URL) as nobody:
        by_reader = binding(reader)
        sent = await by_reader.send("hello")
        outcomes = {
            "reader sends": state(sent),
            "reader gets": state(await by_reader.get(task_id_of(sent))),
            "reader lists": await by_reader.list(),
            "reader cancels": await by_reader.cancel(task_id_of(sent)),
            "reader streams": await by_reader.stream("x"),
            "planner streams": await binding(planner).stream("x"),
            "planner lists": state_or_total(await binding(planner).list()),
            "planner at another door": await binding(wrong_door).list(),
            "nobody": await binding(nobody).list(),
            "nobody, no version": await binding(nobody).versionless().get("x"),
            "bad token": await binding(nobody).with_headers(Authorization="Bearer nope").list(),
        }
    assert outcomes == {
        "reader sends": COMPLETED, "reader gets": COMPLETED,
        "reader lists": "403 insufficient_scope", "reader cancels": "403 insufficient_scope",
        "reader streams": "403 insufficient_scope", "planner streams": "403 insufficient_scope",
        "planner lists": 0, "planner at another door": "403 not_permitted",
        "nobody": "401 unauthenticated", "nobody, no version": "401 unauthenticated",
        "bad token": "401 invalid_token"}


def state_or_total(outcome: Outcome) -> Any:
    return outcome if isinstance(outcome, str) else outcome["totalSize"]


@pytest.mark.parametrize("binding", [JsonRpc, HttpJson], ids=["JSON-RPC", "HTTP+JSON"])
async def test_a_call_outside_its_scopes_is_403_whatever_version_it_asks_for(
        binding: type[Binding]) -> None:
    """DoorAuth's checks come first, in the reference's order, whatever the version; a
    call in another version that passes them is told its version."""
    setup = formation()
    async with clients(setup, "reader") as (reader,):
        for_1_0 = await binding(reader).list()
        without = await binding(reader).versionless().list()
        old = await binding(reader).with_headers(**{"A2A-Version": "0.3"}).cancel("t-1")
        in_scope_without = await binding(reader).versionless().get("t-1")
    assert (for_1_0, without, old) == ("403 insufficient_scope",) * 3
    assert in_scope_without == "VERSION_NOT_SUPPORTED"
