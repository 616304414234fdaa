"""The door over a real socket (uvicorn on 127.0.0.1:0), driven by a2a-sdk's own client:
proof that a real-world A2A 1.0 client works with it. Also the gate under concurrent
senders and murmur.WatchSession, which need a socket."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from gateway.door.app import Door
from gateway.door.tasks import GateConfig, TaskRun
from tests.support.door import A2A_HEADERS, make_door, send_params, serve, sse_results


class Agent:
    """A scriptable agent: what it does depends on the task text."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.cancelled: list[str] = []

    async def __call__(self, run: TaskRun) -> str | None:
        text = run.text
        if text.startswith("hold"):
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.append(run.id)
                raise
            return "released"
        if text == "ask":
            answer = await run.input_required("which language?")
            return f"writing {answer['parts'][0]['text']}"
        if text == "refuse":
            await run.reject("not my job")
            return None
        if text == "crash":
            raise ValueError("the model is down")
        await run.status("thinking")
        await run.artifact([{"text": "part one "}], name="essay")
        await run.artifact([{"text": "part two"}], append=True, last_chunk=True)
        return f"echo: {text}"


@pytest.fixture
async def door_url() -> AsyncIterator[tuple[Door, Agent, str]]:
    agent = Agent()
    door = make_door(agent, gate=GateConfig(concurrency=8, queue_depth=8))
    async with serve(door.app) as url:
        door.set_url(url)
        yield door, agent, url


async def sdk_client(url: str, **config: Any) -> Client:
    return await ClientFactory(ClientConfig(**config)).create_from_url(url)


def message(text: str, task: Task | None = None) -> SendMessageRequest:
    msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    if task is not None:
        msg.task_id = task.id
        msg.context_id = task.context_id
    return SendMessageRequest(message=msg)


async def events_of(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]


async def one_task(client: Client, request: SendMessageRequest) -> Task:
    (event,) = await events_of(client, request)
    assert event.HasField("task")
    return event.task


async def test_send_blocking_returns_the_finished_task(door_url: tuple[Door, Agent, str]) -> None:
    _, _, url = door_url
    client = await sdk_client(url, streaming=False)
    try:
        task = await one_task(client, message("hello"))
    finally:
        await client.close()
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    essay, result = task.artifacts
    assert [part.text for part in essay.parts] == ["part one ", "part two"]
    assert result.parts[0].text == "echo: hello"


async def test_send_return_immediately_then_get(door_url: tuple[Door, Agent, str]) -> None:
    door, agent, url = door_url
    client = await sdk_client(url, streaming=False, polling=True)
    try:
        task = await one_task(client, message("hold on"))
        assert task.status.state == TaskState.TASK_STATE_WORKING
        agent.release.set()
        await door.result(task.id)
        final = await client.get_task(GetTaskRequest(id=task.id))
    finally:
        await client.close()
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert final.artifacts[0].parts[0].text == "released"


async def test_stream_sends_the_task_then_each_update(door_url: tuple[Door, Agent, str]) -> None:
    _, _, url = door_url
    client = await sdk_client(url, streaming=True)
    try:
        events = await events_of(client, message("stream me"))
    finally:
        await client.close()
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds[0] == "task"
    assert kinds[1:] == ["status_update", "artifact_update", "artifact_update",
                         "artifact_update", "status_update"]
    assert events[1].status_update.status.message.parts[0].text == "thinking"
    assert events[3].artifact_update.append and events[3].artifact_update.last_chunk
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_get_task_with_history_length(door_url: tuple[Door, Agent, str]) -> None:
    _, _, url = door_url
    client = await sdk_client(url, streaming=False)
    try:
        task = await one_task(client, message("history"))
        full = await client.get_task(GetTaskRequest(id=task.id))
        last = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        none = await client.get_task(GetTaskRequest(id=task.id, history_length=0))
    finally:
        await client.close()
    assert len(full.history) == 2  # the user's message and the "thinking" status
    assert [m.parts[0].text for m in last.history] == ["thinking"]
    assert len(none.history) == 0


async def test_list_tasks_with_pagination(door_url: tuple[Door, Agent, str]) -> None:
    _, _, url = door_url
    client = await sdk_client(url, streaming=False)
    try:
        sent = [(await one_task(client, message(f"task {i}"))).id for i in range(5)]
        seen: list[str] = []
        token = ""
        pages = 0
        while True:
            page = await client.list_tasks(ListTasksRequest(page_size=2, page_token=token))
            assert page.total_size == 5 and page.page_size == 2
            seen += [task.id for task in page.tasks]
            pages += 1
            token = page.next_page_token
            if not token:
                break
    finally:
        await client.close()
    assert pages == 3
    assert seen == list(reversed(sent)), "newest first, each once"


async def test_subscribe_starts_with_the_task_and_ends_with_it(
        door_url: tuple[Door, Agent, str]) -> None:
    _, agent, url = door_url
    client = await sdk_client(url, streaming=True)
    starter = await sdk_client(url, streaming=False, polling=True)
    try:
        task = await one_task(starter, message("hold me"))
        received: list[StreamResponse] = []

        async def follow() -> None:
            async for event in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                received.append(event)
                if len(received) == 1:
                    agent.release.set()

        await asyncio.wait_for(follow(), 10)
    finally:
        await client.close()
        await starter.close()
    assert received[0].task.id == task.id
    assert received[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert received[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_subscribe_to_an_ended_task_is_unsupported(
        door_url: tuple[Door, Agent, str]) -> None:
    _, _, url = door_url
    blocking = await sdk_client(url, streaming=False)
    client = await sdk_client(url, streaming=True)
    try:
        task = await one_task(blocking, message("done soon"))
        with pytest.raises(UnsupportedOperationError, match="has ended"):
            async for _ in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                pass
    finally:
        await client.close()
        await blocking.close()


async def test_cancel_a_running_task(door_url: tuple[Door, Agent, str]) -> None:
    door, agent, url = door_url
    client = await sdk_client(url, streaming=False, polling=True)
    try:
        task = await one_task(client, message("hold still"))
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        await asyncio.wait_for(door.drained(), 5)
        assert agent.cancelled == [task.id]
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
    finally:
        await client.close()


async def test_input_required_then_resume(door_url: tuple[Door, Agent, str]) -> None:
    _, _, url = door_url
    client = await sdk_client(url, streaming=False)
    try:
        asked = await one_task(client, message("ask"))
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert asked.status.message.parts[0].text == "which language?"
        answered = await one_task(client, message("rust", task=asked))
    finally:
        await client.close()
    assert answered.id == asked.id
    assert answered.status.state == TaskState.TASK_STATE_COMPLETED
    assert answered.artifacts[-1].parts[0].text == "writing rust"


async def test_a_stream_stops_at_input_required_and_a_new_one_resumes(
        door_url: tuple[Door, Agent, str]) -> None:
    _, _, url = door_url
    client = await sdk_client(url, streaming=True)
    try:
        first = await events_of(client, message("ask"))
        asked = first[0].task
        assert first[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        second = await events_of(client, message("go", task=asked))
    finally:
        await client.close()
    assert second[0].task.id == asked.id
    assert second[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_reject(door_url: tuple[Door, Agent, str]) -> None:
    _, _, url = door_url
    client = await sdk_client(url, streaming=False)
    try:
        task = await one_task(client, message("refuse"))
    finally:
        await client.close()
    assert task.status.state == TaskState.TASK_STATE_REJECTED
    assert task.status.message.parts[0].text == "not my job"


async def test_an_agent_that_raises_fails_the_task(door_url: tuple[Door, Agent, str]) -> None:
    _, _, url = door_url
    client = await sdk_client(url, streaming=True)
    try:
        events = await events_of(client, message("crash"))
    finally:
        await client.close()
    final = events[-1].status_update.status
    assert final.state == TaskState.TASK_STATE_FAILED
    assert final.message.parts[0].text == "the model is down"


# --- the gate under concurrent senders ----------------------------------------------


async def test_ten_concurrent_senders_against_concurrency_1_queue_depth_2() -> None:
    release = asyncio.Event()
    started: list[str] = []

    async def slow(run: TaskRun) -> str:
        started.append(run.text)
        await release.wait()
        return f"did {run.text}"

    door = make_door(slow, gate=GateConfig(concurrency=1, queue_depth=2))
    async with serve(door.app) as url, httpx.AsyncClient(base_url=url, headers=A2A_HEADERS,
                                                          timeout=20) as http:
        async def send(i: int) -> dict[str, Any]:
            response = await http.post("/", json={"jsonrpc": "2.0", "id": i,
                                                  "method": "SendMessage",
                                                  "params": send_params(f"task {i}")})
            body: dict[str, Any] = response.json()
            return body

        senders = [asyncio.create_task(send(i)) for i in range(10)]
        for _ in range(500):
            if sum(task.done() for task in senders) == 7:
                break
            await asyncio.sleep(0.01)
        refused = [task.result() for task in senders if task.done()]
        assert len(refused) == 7, "exactly seven are answered at once"
        assert all(body["error"]["code"] == -32050 for body in refused)
        assert all(body["error"]["data"][0]["reason"] == "MEMBER_BUSY" for body in refused)
        assert len(started) == 1, "one runs, two wait"
        release.set()
        held = await asyncio.wait_for(asyncio.gather(*senders), 10)
    completed = [body for body in held if "result" in body]
    assert len(completed) == 3
    assert all(body["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
               for body in completed)


async def test_single_refuses_a_second_task_over_the_socket() -> None:
    async def quick(run: TaskRun) -> str:
        return "ok"

    door = make_door(quick, gate=GateConfig(task_acceptance="single", queue_depth=3))
    async with serve(door.app) as url:
        door.set_url(url)
        client = await sdk_client(url, streaming=False)
        try:
            first = await one_task(client, message("one"))
            with pytest.raises(A2AClientError, match="-32050"):
                await one_task(client, message("two"))
        finally:
            await client.close()
    assert first.status.state == TaskState.TASK_STATE_COMPLETED


# --- murmur.WatchSession -------------------------------------------------------------


async def test_watch_session_streams_the_trace_records(
        door_url: tuple[Door, Agent, str]) -> None:
    door, _, url = door_url
    door.trace.emit("session_start", session_id="ses_0123")
    records: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, headers=A2A_HEADERS, timeout=10) as http:
        async with http.stream("POST", "/", json={"jsonrpc": "2.0", "id": "w",
                                                  "method": "murmur.WatchSession"}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            async for event in sse_results(stream):
                record = event["result"]
                records.append(record)
                if record["event"] == "session_start":
                    await http.post("/", json={"jsonrpc": "2.0", "id": 1,
                                               "method": "SendMessage",
                                               "params": send_params("watched")})
                if record.get("state") == "TASK_STATE_COMPLETED":
                    break
    assert records[0]["event"] == "session_start", "the backlog comes first"
    events = [record["event"] for record in records]
    assert "a2a_task_received" in events
    assert json.dumps(records).count("mft1.") == 0
