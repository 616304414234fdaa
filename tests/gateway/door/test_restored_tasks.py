"""A door's tasks across sessions (gateway/door/tasks.py): the tasks an earlier session
kept come back answering their owners only, a live one FAILED with a message saying
so and written to the journal; a task in an earlier context reads that context's
exchange (its owner's tasks only), after a restore too; the index by context follows
retention."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.a2a.jsonrpc import RpcError
from gateway.door.task_record import TaskRecord
from gateway.door.tasks import GateConfig, TaskRun, TaskStore
from gateway.protocol import TaskState
from gateway.trace.bus import TraceBus
from tests.support.door import OPERATOR, bearer, user_message

ALICE = bearer("alice")
BOB = bearer("bob")


@dataclass(frozen=True)
class Kept:
    owner: str
    task: dict[str, Any]
    updated_ns: int = 1


class Journal:
    def __init__(self) -> None:
        self.states: dict[str, str] = {}

    def put(self, task: TaskRecord) -> None:
        self.states[task.id] = task.state


def kept_task(task_id: str, state: str, context: str = "ctx", text: str = "hi",
              answer: str | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {
        "id": task_id, "contextId": context, "status": {"state": state},
        "history": [{"messageId": f"m-{task_id}", "role": "ROLE_USER",
                     "parts": [{"text": text}], "taskId": task_id, "contextId": context}]}
    if answer is not None:
        task["artifacts"] = [{"artifactId": f"a-{task_id}", "name": "result",
                              "parts": [{"text": answer[:3]}, {"text": answer[3:]}]}]
    return task


class Recorder:
    def __init__(self) -> None:
        self.histories: list[list[dict[str, Any]]] = []

    async def __call__(self, run: TaskRun) -> str:
        self.histories.append(run.history)
        return f"re: {run.text}"


def restored_store(*kept: Kept, agent: Any = None, max_finished: int = 100
                   ) -> tuple[TaskStore, Journal]:
    store = TaskStore(agent or Recorder(), GateConfig(), TraceBus(), max_finished=max_finished)
    journal = Journal()
    store.journal = journal
    store.restore(kept)
    return store, journal


def test_restored_tasks_answer_their_owners_and_the_operator_only() -> None:
    store, _ = restored_store(Kept("bearer:alice", kept_task("t1", TaskState.COMPLETED,
                                                             answer="done here")))
    assert store.visible("t1", ALICE).state == TaskState.COMPLETED
    assert store.visible("t1", OPERATOR).snapshot()["artifacts"][0]["name"] == "result"
    with pytest.raises(RpcError) as refused:
        store.visible("t1", BOB)
    assert refused.value.code == -32001


def test_a_task_live_when_its_session_ended_is_failed_with_a_reason_and_journaled() -> None:
    store, journal = restored_store(
        Kept("bearer:alice", kept_task("live", TaskState.INPUT_REQUIRED)),
        Kept("operator", kept_task("done", TaskState.COMPLETED)))
    failed = store.visible("live", ALICE).snapshot()
    assert failed["status"]["state"] == TaskState.FAILED
    reason = failed["status"]["message"]["parts"][0]["text"]
    assert "ended while this task was input-required" in reason
    assert failed["history"][-1] == failed["status"]["message"]
    assert journal.states == {"live": TaskState.FAILED, "done": TaskState.COMPLETED}
    with pytest.raises(RpcError):   # it takes no more messages
        store.send(user_message("more", taskId="live"), ALICE)


def test_restoring_counts_against_the_retention_bound_oldest_first() -> None:
    kept = [Kept("operator", kept_task(f"t{n}", TaskState.COMPLETED), updated_ns=n)
            for n in range(5)]
    store, _ = restored_store(*kept, max_finished=2)
    assert [store.known(f"t{n}") for n in range(5)] == [False, False, False, True, True]


async def test_a_new_task_in_an_earlier_context_reads_its_owners_exchange_only() -> None:
    agent = Recorder()
    store, _ = restored_store(
        Kept("bearer:alice", kept_task("t1", TaskState.COMPLETED, text="I am Ada",
                                       answer="hello Ada")),
        Kept("bearer:bob", kept_task("t2", TaskState.COMPLETED, text="I am Bob")),
        agent=agent)
    for caller, message in ((ALICE, user_message("who am I?", contextId="ctx")),
                            (BOB, user_message("and me?", contextId="ctx")),
                            (ALICE, user_message("new here"))):
        store.send(message, caller)
        for _ in range(10):
            await asyncio.sleep(0)
    alice, bob, fresh = agent.histories
    assert [(m["role"], m["parts"]) for m in alice] == [
        ("ROLE_USER", [{"text": "I am Ada"}]), ("ROLE_AGENT", [{"text": "hello Ada"}])]
    assert [m["parts"][0]["text"] for m in bob] == ["I am Bob"]
    assert fresh == []


async def test_a_context_forgets_a_task_past_the_bound() -> None:
    agent = Recorder()
    store = TaskStore(agent, GateConfig(), TraceBus(), max_finished=1)
    first = store.send(user_message("one", contextId="c"), OPERATOR)
    first.revealed = True
    for _ in range(10):
        await asyncio.sleep(0)
    second = store.send(user_message("two", contextId="c"), OPERATOR)
    second.revealed = True
    for _ in range(10):
        await asyncio.sleep(0)
    store.send(user_message("three", contextId="c"), OPERATOR)
    for _ in range(10):
        await asyncio.sleep(0)
    assert not store.known(first.id)
    assert [m["parts"][0]["text"] for m in agent.histories[2]] == ["two", "re: two"]
