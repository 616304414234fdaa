"""The task store: the lifecycle gate, visibility, the executor, pagination, traces."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.a2a.jsonrpc import RpcError
from gateway.a2a.models import ListTasksRequest
from gateway.door.tasks import GateConfig, TaskEndedError, TaskRun, TaskStore
from gateway.protocol import TaskState
from gateway.trace.bus import TraceBus
from tests.support.door import OPERATOR, bearer, member, user_message

PLANNER = member("planner")
REVIEWER = member("reviewer")


class Gate:
    """An agent whose tasks wait until released; it records what it saw."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def __call__(self, run: TaskRun) -> str:
        self.started.append(run.text)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(run.text)
            raise
        return f"done {run.text}"


def store_with(agent: Any, trace: TraceBus | None = None, **gate: Any) -> TaskStore:
    return TaskStore(agent, GateConfig(**gate), trace or TraceBus())


def count(store: TaskStore) -> int:
    return int(store.list_tasks(OPERATOR, ListTasksRequest())["totalSize"])


async def settle(*_: object) -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# --- the gate ----------------------------------------------------------------------


async def test_the_gate_holds_concurrency_plus_queue_depth_and_refuses_the_rest() -> None:
    agent = Gate()
    store = store_with(agent, concurrency=1, queue_depth=2, retry_after_ms=300)
    held = [store.send(user_message(f"t{i}"), OPERATOR) for i in range(3)]
    with pytest.raises(RpcError) as refused:
        store.send(user_message("t3"), OPERATOR)
    assert refused.value.code == -32050
    assert refused.value.metadata == {"retryAfterMs": "300"}
    assert count(store) == 3, "a refused task is never created"
    await settle()
    assert [record.state for record in held] == [
        TaskState.WORKING, TaskState.SUBMITTED, TaskState.SUBMITTED]
    agent.release.set()
    for record in held:
        await store.settled(record)
    assert agent.started == ["t0", "t1", "t2"], "queued tasks run in order"
    assert all(record.state == TaskState.COMPLETED for record in held)


async def test_single_takes_exactly_one_task_in_the_session() -> None:
    store = store_with(lambda run: _done(), task_acceptance="single", queue_depth=5)
    first = store.send(user_message("one"), OPERATOR)
    await store.settled(first)
    with pytest.raises(RpcError) as refused:
        store.send(user_message("two"), OPERATOR)
    assert refused.value.code == -32050


async def _done() -> str:
    return "ok"


async def test_after_task_exit_stops_once_nothing_is_held() -> None:
    agent = Gate()
    store = store_with(agent, queue_depth=1, after_task="exit")
    reasons: list[str] = []
    store.on_stop(reasons.append)
    first = store.send(user_message("a"), OPERATOR)
    second = store.send(user_message("b"), OPERATOR)
    await settle()
    store.cancel(first)
    await settle()
    assert reasons == [], "a held task is never dropped"
    with pytest.raises(RpcError):
        store.send(user_message("c"), OPERATOR)
    agent.release.set()
    await store.settled(second)
    await settle()
    assert second.state == TaskState.COMPLETED
    assert reasons == ["after_task"]


async def test_cancelling_a_queued_task_frees_its_place() -> None:
    agent = Gate()
    store = store_with(agent, queue_depth=1)
    store.send(user_message("running"), OPERATOR)
    queued = store.send(user_message("queued"), OPERATOR)
    with pytest.raises(RpcError):
        store.send(user_message("late"), OPERATOR)
    store.cancel(queued)
    assert queued.state == TaskState.CANCELED
    late = store.send(user_message("late"), OPERATOR)
    assert late.state == TaskState.SUBMITTED
    agent.release.set()
    await store.settled(late)
    assert "queued" not in agent.started


async def test_a_task_cancelled_before_its_agent_ran_gives_back_its_place() -> None:
    agent = Gate()
    store = store_with(agent)
    first = store.send(user_message("first"), OPERATOR)
    store.cancel(first)  # its runner has not taken a step yet
    await settle()
    assert store.held == 0
    second = store.send(user_message("second"), OPERATOR)
    agent.release.set()
    await store.settled(second)
    assert second.state == TaskState.COMPLETED


# --- the executor ------------------------------------------------------------------


async def test_cancel_reaches_the_running_agent() -> None:
    agent = Gate()
    store = store_with(agent)
    record = store.send(user_message("long"), OPERATOR)
    await settle()
    store.cancel(record)
    assert record.state == TaskState.CANCELED
    await settle()
    assert agent.cancelled == ["long"]
    with pytest.raises(RpcError) as again:
        store.cancel(record)
    assert again.value.code == -32002


async def test_an_agent_that_raises_fails_its_task_with_the_message() -> None:
    async def broken(run: TaskRun) -> str:
        raise RuntimeError("the model is down")

    store = store_with(broken)
    record = store.send(user_message("x"), OPERATOR)
    await store.settled(record)
    assert record.state == TaskState.FAILED
    assert record.status["message"]["parts"] == [{"text": "the model is down"}]
    assert record.status["message"]["role"] == "ROLE_AGENT"


async def test_input_required_then_a_follow_up_resumes_the_task() -> None:
    async def asks(run: TaskRun) -> str:
        answer = await run.input_required("which language?")
        return f"writing {answer['parts'][0]['text']}"

    store = store_with(asks)
    record = store.send(user_message("write code"), PLANNER)
    await store.settled(record)
    assert record.state == TaskState.INPUT_REQUIRED
    assert record.status["message"]["parts"] == [{"text": "which language?"}]
    with pytest.raises(RpcError) as mismatch:
        store.send(user_message("rust", taskId=record.id, contextId="other"), PLANNER)
    assert mismatch.value.code == -32602
    with pytest.raises(RpcError) as not_yours:
        store.send(user_message("rust", taskId=record.id), REVIEWER)
    assert not_yours.value.code == -32001
    same = store.send(user_message("rust", taskId=record.id), PLANNER)
    assert same is record and record.state == TaskState.WORKING
    await store.settled(record)
    assert record.state == TaskState.COMPLETED
    assert record.artifacts[-1]["parts"] == [{"text": "writing rust"}]
    assert [m["role"] for m in record.history] == ["ROLE_USER", "ROLE_AGENT", "ROLE_USER"]
    with pytest.raises(RpcError) as ended:
        store.send(user_message("more", taskId=record.id), PLANNER)
    assert ended.value.code == -32004


async def test_a_follow_up_to_a_working_task_is_unsupported() -> None:
    agent = Gate()
    store = store_with(agent)
    record = store.send(user_message("x"), OPERATOR)
    with pytest.raises(RpcError) as busy:
        store.send(user_message("y", taskId=record.id), OPERATOR)
    assert busy.value.code == -32004
    agent.release.set()
    await store.settled(record)


async def test_reject_ends_the_task_rejected() -> None:
    async def refuses(run: TaskRun) -> None:
        await run.reject("not my job")
        with pytest.raises(TaskEndedError):
            await run.status("still here")

    store = store_with(refuses)
    record = store.send(user_message("x"), OPERATOR)
    await store.settled(record)
    await settle()
    assert record.state == TaskState.REJECTED
    assert record.status["message"]["parts"] == [{"text": "not my job"}]
    assert store.held == 0


async def test_a_reply_nobody_saw_the_task_of_leaves_no_task() -> None:
    async def replies(run: TaskRun) -> str:
        await run.reply("hello back")
        return "ignored"

    store = store_with(replies)
    record = store.send(user_message("hello"), OPERATOR)
    await store.settled(record)
    assert record.reply is not None and record.reply["parts"] == [{"text": "hello back"}]
    assert "taskId" not in record.reply
    with pytest.raises(RpcError):
        store.visible(record.id, OPERATOR)
    assert count(store) == 0


async def test_a_reply_to_a_task_already_shown_completes_it() -> None:
    async def replies(run: TaskRun) -> None:
        await asyncio.sleep(0)
        await run.reply("hello back")

    store = store_with(replies)
    record = store.send(user_message("hello"), OPERATOR)
    record.revealed = True
    await store.settled(record)
    assert record.state == TaskState.COMPLETED
    assert store.visible(record.id, OPERATOR) is record
    assert record.status["message"]["parts"] == [{"text": "hello back"}]


async def test_artifacts_append_and_earlier_snapshots_do_not_change() -> None:
    seen: list[dict[str, Any]] = []

    async def writes(run: TaskRun) -> None:
        first = await run.artifact([{"text": "a"}], name="doc")
        seen.append(store.visible(run.id, OPERATOR).snapshot())
        again = await run.artifact([{"text": "b"}], append=True, last_chunk=True)
        assert again == first
        await run.artifact([{"raw": "aGk=", "mediaType": "text/plain", "filename": "h.txt"},
                            {"url": "https://example.com/f"}, {"data": {"k": [1]}}])

    store = store_with(writes)
    record = store.send(user_message("x"), OPERATOR)
    queue = store.subscribe(record)
    await store.settled(record)
    assert seen[0]["artifacts"][0]["parts"] == [{"text": "a"}]
    doc, files = record.artifacts
    assert doc["name"] == "doc" and doc["parts"] == [{"text": "a"}, {"text": "b"}]
    assert len(files["parts"]) == 3
    events = []
    while not queue.empty():
        events.append(queue.get_nowait())
    updates = [event["artifactUpdate"] for event in events if event and "artifactUpdate" in event]
    assert updates[1]["append"] is True and updates[1]["lastChunk"] is True
    assert updates[1]["artifact"]["parts"] == [{"text": "b"}], "an append event carries the chunk"


# --- visibility and listing --------------------------------------------------------


async def test_a_credential_sees_only_its_own_tasks_and_the_operator_sees_all() -> None:
    store = store_with(lambda run: _done(), queue_depth=10)
    mine = store.send(user_message("p"), PLANNER)
    theirs = store.send(user_message("r"), REVIEWER)
    client = store.send(user_message("c"), bearer("ci"))
    assert store.visible(mine.id, PLANNER) is mine
    for caller, task in ((PLANNER, theirs), (REVIEWER, mine), (bearer("ci"), mine),
                         (PLANNER, client)):
        with pytest.raises(RpcError) as hidden:
            store.visible(task.id, caller)
        assert hidden.value.error_object() == RpcError("TASK_NOT_FOUND").error_object()
    with pytest.raises(RpcError) as unknown:
        store.visible("no-such-task", PLANNER)
    assert unknown.value.error_object() == RpcError("TASK_NOT_FOUND").error_object()
    listed = store.list_tasks(PLANNER, ListTasksRequest())
    assert [task["id"] for task in listed["tasks"]] == [mine.id]
    assert store.list_tasks(OPERATOR, ListTasksRequest())["totalSize"] == 3


async def test_list_tasks_pages_newest_first_without_gaps_or_repeats() -> None:
    store = store_with(lambda run: _done(), queue_depth=10)
    records = [store.send(user_message(f"t{i}"), OPERATOR) for i in range(5)]
    for record in records:
        await store.settled(record)
    pages, token = [], ""
    while True:
        page = store.list_tasks(OPERATOR, ListTasksRequest(page_size=2, page_token=token))
        assert page["totalSize"] == 5 and page["pageSize"] == 2
        assert "artifacts" not in page["tasks"][0]   # only with includeArtifacts
        assert page["tasks"][0]["history"]          # unset historyLength: no limit
        pages.append([task["id"] for task in page["tasks"]])
        token = page["nextPageToken"]
        if not token:
            break
    ids = [task_id for page in pages for task_id in page]
    assert [len(page) for page in pages] == [2, 2, 1]
    assert sorted(ids) == sorted(record.id for record in records)
    stamps = [store.visible(task_id, OPERATOR).updated_ns for task_id in ids]
    assert stamps == sorted(stamps, reverse=True)


async def test_list_tasks_filters_and_options() -> None:
    agent = Gate()
    store = store_with(agent, concurrency=2)
    done = store.send(user_message("a", contextId="ctx-1"), OPERATOR)
    working = store.send(user_message("b"), OPERATOR)
    store.cancel(done)
    await settle()
    by_state = store.list_tasks(OPERATOR, ListTasksRequest(status=TaskState.WORKING))
    assert [task["id"] for task in by_state["tasks"]] == [working.id]
    by_context = store.list_tasks(OPERATOR, ListTasksRequest(context_id="ctx-1",
                                                             history_length=1))
    assert [task["id"] for task in by_context["tasks"]] == [done.id]
    assert len(by_context["tasks"][0]["history"]) == 1
    unlimited = store.list_tasks(OPERATOR, ListTasksRequest(context_id="ctx-1"))
    # an unset historyLength imposes no limit (the specification's history rule)
    assert unlimited["tasks"][0]["history"] == done.history
    future = store.list_tasks(OPERATOR, ListTasksRequest(
        status_timestamp_after="2999-01-01T00:00:00Z"))
    assert future["tasks"] == [] and future["nextPageToken"] == ""
    with pytest.raises(RpcError, match="pageToken"):
        store.list_tasks(OPERATOR, ListTasksRequest(page_token="%%%"))
    with pytest.raises(RpcError, match="statusTimestampAfter"):
        store.list_tasks(OPERATOR, ListTasksRequest(status_timestamp_after="yesterday"))
    agent.release.set()
    await store.settled(working)


async def test_old_finished_tasks_are_forgotten_first() -> None:
    store = TaskStore(lambda run: _done(), GateConfig(queue_depth=10), TraceBus(),
                      max_finished=2)
    records = [store.send(user_message(f"t{i}"), OPERATOR) for i in range(4)]
    for record in records:
        await store.settled(record)
    with pytest.raises(RpcError):
        store.visible(records[0].id, OPERATOR)
    assert store.visible(records[3].id, OPERATOR) is records[3]
    assert count(store) == 2


# --- wind-down ---------------------------------------------------------------------


async def test_wind_down_cancels_the_running_and_refuses_the_queued() -> None:
    agent = Gate()
    store = store_with(agent, queue_depth=2)
    running = store.send(user_message("r"), OPERATOR)
    queued = store.send(user_message("q"), OPERATOR)
    await settle()
    store.close_gate()
    assert store.refuse_queued("shutting down") == 1
    assert store.cancel_running("shutting down") == 1
    await asyncio.wait_for(store.drained(), 5)
    assert queued.state == TaskState.REJECTED and running.state == TaskState.CANCELED
    assert agent.cancelled == ["r"]
    with pytest.raises(RpcError) as closed:
        store.send(user_message("n"), OPERATOR)
    assert closed.value.code == -32050


# --- traces ------------------------------------------------------------------------


async def test_traces_name_the_credential_and_the_calling_member() -> None:
    trace = TraceBus()
    records: list[dict[str, Any]] = []
    trace.add_sink(records.append)
    store = store_with(lambda run: _done(), trace, queue_depth=5)
    peer = store.send(user_message("x"), PLANNER)
    client = store.send(user_message("y"), bearer("ci"))
    await store.settled(peer)
    await store.settled(client)
    received = [r for r in records if r["event"] == "a2a_task_received"]
    assert received[0]["credential"] == "member:planner"
    assert received[0]["formation_member"] == "planner"
    assert received[0]["origin"] == "peer" and received[0]["trust"] == "untrusted"
    assert received[1]["credential"] == "bearer:ci" and "formation_member" not in received[1]
    states = [r["state"] for r in records if r["event"] == "task_state"
              and r["task_id"] == peer.id]
    assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert all(r["ts"].endswith("Z") for r in records)


async def test_a_failing_listener_does_not_keep_a_task_from_ending() -> None:
    store = store_with(lambda run: _done())
    seen: list[str] = []

    def broken(task: dict[str, Any]) -> None:
        raise RuntimeError("listener bug")

    store.on_task_end(broken)
    store.on_task_end(lambda task: seen.append(task["status"]["state"]))
    record = store.send(user_message("x"), OPERATOR)
    await store.settled(record)
    await settle()
    assert record.state == TaskState.COMPLETED
    assert seen == ["TASK_STATE_COMPLETED"]
    assert store.held == 0


async def test_task_ids_are_in_the_order_tasks_were_made_and_unguessable() -> None:
    """32 hex digits as before: the milliseconds of their making, then 80 random bits,
    so tasks.db's index of ids grows at its end (docs/durable-tasks.md)."""
    import re
    import time

    async def done(run: TaskRun) -> str:
        return "ok"

    store = store_with(done, concurrency=1, queue_depth=100)
    made = []
    for _ in range(3):
        made.append(store.send(user_message("x"), OPERATOR).id)
        time.sleep(0.002)
    same_moment = {store.send(user_message("x"), OPERATOR).id for _ in range(50)}
    assert all(re.fullmatch(r"[0-9a-f]{32}", task_id) for task_id in made)
    assert made == sorted(made)
    assert abs(int(made[0][:12], 16) - time.time_ns() // 1_000_000) < 60_000
    assert len(same_moment) == 50
    assert len({task_id[12:] for task_id in same_moment}) == 50
