"""Hardening (issue 10): memory and files. A flood of large tasks stays within the door's
byte budget for ended tasks (the oldest forgotten first, a held task never), and a FIFO
an agent leaves in ``out/`` is refused at once while the door keeps answering (a real
uvicorn on 127.0.0.1, in a thread of its own, so a frozen loop fails the test instead of
hanging it)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from gateway.door.retention import json_weight
from gateway.door.tasks import DEFAULT_MAX_FINISHED_BYTES, GateConfig, TaskRun, TaskStore
from gateway.trace.bus import TraceBus
from tests.support.door import (
    OPERATOR,
    client_for,
    make_door,
    rpc,
    send_params,
    shimmed,
    user_message,
)

MiB = 1024 * 1024
#: Room for the next task while the last one's runner is still handing its place back.
ROOMY = GateConfig(concurrency=2, queue_depth=8)


async def short_answer(run: TaskRun) -> str:
    return "ok"


def big_text(label: str, size: int) -> str:
    return (label + ":").ljust(size, "x")


async def get_task(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    return await rpc(client, "GetTask", {"id": task_id})


# --- 4. task memory is bounded by bytes, not only by count ------------------------------


def test_the_byte_budget_is_64_mib_by_default_and_door_settings_reach_the_store() -> None:
    assert DEFAULT_MAX_FINISHED_BYTES == 64 * MiB
    assert TaskStore(short_answer, GateConfig(), TraceBus()).finished.max_bytes == 64 * MiB
    assert make_door(short_answer).store.finished.max_bytes == 64 * MiB
    assert make_door(short_answer, max_finished_bytes=5 * MiB).store.finished.max_bytes == (
        5 * MiB)


def test_wide_characters_and_nested_values_weigh_what_they_hold() -> None:
    ascii_text = "x" * MiB
    wide_text = "\U0001F600" * MiB  # four bytes a character in memory
    assert json_weight({"parts": [{"text": ascii_text}]}) >= MiB
    assert json_weight({"parts": [{"text": wide_text}]}) >= 4 * MiB
    deep: Any = "leaf"
    for _ in range(100_000):  # deeper than any recursion limit
        deep = [deep]
    assert json_weight(deep) > 100_000


async def test_a_flood_of_one_mib_sendmessages_keeps_the_store_within_its_byte_budget() -> None:
    budget = 4 * MiB
    door = make_door(short_answer, gate=ROOMY, max_finished_bytes=budget)
    ids = []
    async with client_for(shimmed(door), "operator") as client:
        for number in range(24):  # 24 x 512 KiB = 12 MiB sent, three times the budget
            body = await rpc(client, "SendMessage",
                             send_params(big_text(f"task{number}", 512 * 1024)))
            ids.append(body["result"]["task"]["id"])
            assert door.store.finished_bytes <= budget
        newest = await get_task(client, ids[-1])
        oldest = await get_task(client, ids[0])
        listed = await rpc(client, "ListTasks", {"pageSize": 100})
    text = newest["result"]["history"][0]["parts"][0]["text"]
    assert text.startswith("task23:") and len(text) == 512 * 1024
    assert oldest["error"]["code"] == -32001  # forgotten, as a task past the count is
    kept = {task["id"] for task in listed["result"]["tasks"]}
    assert ids[-1] in kept and ids[0] not in kept
    assert 4 <= len(kept) <= 8  # a budget's worth of 512 KiB tasks, not all 24


async def test_memory_held_by_ended_tasks_follows_the_byte_budget_not_the_task_count() -> None:
    budget = 4 * MiB
    door = make_door(short_answer, gate=ROOMY, max_finished_bytes=budget)
    async with client_for(shimmed(door), "operator") as client:
        await rpc(client, "SendMessage", send_params("warm-up"))
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for number in range(32):  # 16 MiB of messages
                await rpc(client, "SendMessage",
                          send_params(big_text(f"task{number}", 512 * 1024)))
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert held < 2 * budget, f"{held / MiB:.1f} MiB held for a {budget / MiB:.0f} MiB budget"


async def test_a_running_task_is_never_forgotten_however_large_the_flood() -> None:
    release = asyncio.Event()

    async def agent(run: TaskRun) -> str:
        if run.text.startswith("hold"):
            await release.wait()
            return "y" * (600 * 1024)  # it ends over the budget on its own
        return "ok"

    budget = 1 * MiB
    door = make_door(agent, gate=GateConfig(concurrency=2, queue_depth=8),
                     max_finished_bytes=budget)
    async with client_for(shimmed(door), "operator") as client:
        held = await rpc(client, "SendMessage",
                         send_params(big_text("hold", 700 * 1024), immediately=True))
        held_id = held["result"]["task"]["id"]
        flood = []
        for number in range(12):
            body = await rpc(client, "SendMessage",
                             send_params(big_text(f"flood{number}", 300 * 1024)))
            flood.append(body["result"]["task"]["id"])
        working = await get_task(client, held_id)
        assert working["result"]["status"]["state"] == "TASK_STATE_WORKING"
        assert (await get_task(client, flood[0]))["error"]["code"] == -32001
        release.set()
        await door.result(held_id)
        # Alone over the budget, the task that just ended is still there to be read...
        ended = await get_task(client, held_id)
        assert ended["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert len(ended["result"]["artifacts"][0]["parts"][0]["text"]) == 600 * 1024
        assert door.store.finished_bytes > budget
        # ...until the next task ends.
        await rpc(client, "SendMessage", send_params("next"))
        assert (await get_task(client, held_id))["error"]["code"] == -32001
    assert door.store.finished_bytes <= budget


async def test_artifact_chunks_an_agent_streams_count_against_the_budget() -> None:
    async def agent(run: TaskRun) -> None:
        artifact = await run.artifact([{"text": "a" * (256 * 1024)}], name="log")
        for _ in range(7):
            await run.artifact([{"text": "a" * (256 * 1024)}], artifact_id=artifact,
                               append=True)
        await run.reply("done")

    budget = 4 * MiB
    door = make_door(agent, gate=ROOMY, max_finished_bytes=budget)
    async with client_for(shimmed(door), "operator") as client:
        ids = []
        for _ in range(5):  # 2 MiB of artifacts each
            body = await rpc(client, "SendMessage", send_params("go", immediately=True))
            ids.append(body["result"]["task"]["id"])
            await door.result(ids[-1])
        assert door.store.finished_bytes <= budget
        assert (await get_task(client, ids[0]))["error"]["code"] == -32001
        newest = await get_task(client, ids[-1])
    assert len(newest["result"]["artifacts"][0]["parts"]) == 8


async def test_the_count_cap_still_holds_beside_the_byte_budget() -> None:
    store = TaskStore(short_answer, GateConfig(), TraceBus(), max_finished=3,
                      max_finished_bytes=64 * MiB)
    records = []
    for number in range(5):
        record = store.send(user_message(f"t{number}"), OPERATOR)
        record.revealed = True
        await store.drained()
        records.append(record)
    assert [r.id in store._tasks for r in records] == [False, False, True, True, True]


# --- 5. a FIFO under out/ must not freeze the door ---------------------------------------


@contextlib.contextmanager
def served_in_a_thread(app: Any) -> Iterator[str]:
    """uvicorn on 127.0.0.1:0 in a thread with its own loop, so a blocked loop there
    cannot stall the test's own loop (and its client timeouts)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0,
                                           log_level="warning", lifespan="off"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def unblock(fifo: Path) -> None:
    """Open the FIFO's write end once, so a reader stuck opening it (the defect) wakes."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.fixture
def out_with_a_fifo(tmp_path: Path) -> Iterator[Path]:
    out = tmp_path / "out"
    out.mkdir()
    (out / "result.txt").write_text("the result\n")
    os.mkfifo(out / "pipe")
    yield out
    unblock(out / "pipe")


async def test_a_fifo_in_out_is_refused_at_once_and_the_door_keeps_answering(
        out_with_a_fifo: Path) -> None:
    door = make_door(short_answer, gate=ROOMY, out_dir=out_with_a_fifo)
    with served_in_a_thread(shimmed(door)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=5.0,
                                     headers={"x-test-caller": "operator"}) as client:
            started = time.monotonic()
            try:
                refused = await client.get("/resources/files/pipe")
                head = await client.head("/resources/files/pipe")
            finally:
                unblock(out_with_a_fifo / "pipe")  # so a failing run still stops
            elapsed = time.monotonic() - started
            health = await client.get("/healthz")
            regular = await client.get("/resources/files/result.txt")
    assert refused.status_code == 404 and refused.json()["error"] == "not_found"
    assert head.status_code == 404
    assert elapsed < 2.0, f"the FIFO held the door {elapsed:.1f} s"
    assert health.status_code == 200
    assert regular.status_code == 200 and regular.text == "the result\n"


async def test_many_requests_for_a_fifo_never_stall_the_tasks_beside_them(
        out_with_a_fifo: Path) -> None:
    door = make_door(short_answer, gate=ROOMY, out_dir=out_with_a_fifo)
    with served_in_a_thread(shimmed(door)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=5.0,
                                     headers={"x-test-caller": "operator",
                                              "A2A-Version": "1.0"}) as client:
            try:
                answers = await asyncio.gather(
                    *(client.get("/resources/files/pipe") for _ in range(20)),
                    rpc(client, "SendMessage", send_params("beside")))
            finally:
                unblock(out_with_a_fifo / "pipe")
    assert [answer.status_code for answer in answers[:20]] == [404] * 20
    task = answers[20]["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
