"""Durable tasks on a real formation (docs/durable-tasks.md): every member's door keeps
its tasks in its session's ``tasks.db`` (0600, WAL), each with its owner, written off the
request path and complete when the member has ended; a ``tasks.db`` that is not a task
database is refused with ``E-RUN-067`` naming the file."""

from __future__ import annotations

import json
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import member as support
from tests.support.fake_openai import FakeOpenAI, Reply, SeenRequest, text
from tests.support.formation import (
    CODER_AGENT,
    PLANNER_AGENT,
    REVIEWER_AGENT,
    launcher_env,
    mur,
    simple_project,
)
from tests.support.member import Project, install_capsule, member_env, start_member
from tests.support.model_members import FAKE_KEY, KEY_ENV, write_model_capsule

pytestmark = pytest.mark.integration


def stored(murmur_home: Path) -> list[tuple[str, str, dict[str, object]]]:
    """Every session's tasks.db rows (owner, state, task); each file checked 0600."""
    found = []
    for db_path in (murmur_home / "records").rglob("tasks.db"):
        assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
        with sqlite3.connect(db_path) as db:
            rows = db.execute("SELECT owner, state, task FROM tasks").fetchall()
        found += [(owner, state, json.loads(task)) for owner, state, task in rows]
    return found


def test_every_doors_tasks_are_in_its_sessions_tasks_db_with_their_owners(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["planner", "coder", "reviewer"], entry="planner",
                             reachability={"planner": ["coder", "reviewer"]},
                             agents={"planner": PLANNER_AGENT, "coder": CODER_AGENT,
                                     "reviewer": REVIEWER_AGENT})
    done = mur("run", "--roster", "--project", str(project), "--task", "the parser",
               env=launcher_env(MURMUR_HOME=str(murmur_home)), cwd=project, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = stored(murmur_home)
    owners = sorted(owner for owner, _, _ in rows)
    assert owners == ["member:planner", "member:planner", "operator"], rows
    assert {state for _, state, _ in rows} == {"TASK_STATE_COMPLETED"}
    texts = json.dumps([task for _, _, task in rows])
    assert "the parser" in texts and "code for <write the parser>" in texts


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def test_a_resumed_session_whose_tasks_db_is_corrupt_is_refused_naming_it(
        project: Project) -> None:
    project.capsule("echo")
    first = project.run("echo", "--task", "hi")
    assert first.wait() == 0
    session = first.ready["session_id"]
    (db_path,) = (project.home / "records").rglob(f"{session}/tasks.db")
    db_path.write_bytes(b"SQLite format 3\x00" + b"not a page" * 500)
    process = start_member(project.path, "local/echo", "--resume", session, "--task", "again",
                           env=member_env(project.home))
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1, err.decode()
    assert "E-RUN-067" in err.decode() and str(db_path) in err.decode()
    assert "Traceback" not in err.decode() and "not a page" not in err.decode()


#: An agent that notes what it is told, sleeps when asked, and recalls its context.
KEEPER = '''
import asyncio

from gateway import message_text


async def run(task):
    text = task.text
    if text.startswith("sleep "):
        await asyncio.sleep(float(text.split()[1]))
    if text == "recall":
        return "|".join(message_text(message) for message in task.history)
    return f"noted {text}"
'''
KEEPER_AUTH = ("{bearer: [{name: alice, env: ALICE_TOKEN, scopes: [SendMessage, GetTask, "
               "ListTasks]}, {name: bob, env: BOB_TOKEN, scopes: [SendMessage, GetTask, "
               "ListTasks]}]}")
TOKENS = {"ALICE_TOKEN": "alice-" + "a" * 40, "BOB_TOKEN": "bob-" + "b" * 40}


def say(member: support.Member, text: str, token: str | None = None,
        context_id: str | None = None, wait: bool = True) -> dict[str, object]:
    message: dict[str, object] = {"messageId": f"m-{text}-{context_id}", "role": "ROLE_USER",
                                  "parts": [{"text": text}]}
    if context_id is not None:
        message["contextId"] = context_id
    answer = member.rpc("SendMessage", {"message": message,
                                        "configuration": {"returnImmediately": not wait}},
                        token=token)
    task: dict[str, object] = answer["result"]["task"]
    return task


def answer_text(task: dict[str, object]) -> str:
    artifacts = task["artifacts"]
    assert isinstance(artifacts, list)
    return "".join(str(part["text"]) for part in artifacts[0]["parts"])


def killed_with_tasks(project: Project) -> tuple[str, dict[str, object], dict[str, object]]:
    """A keeper session SIGKILLed with one task alice finished and one the operator's
    still working: (session id, alice's task, the live task)."""
    project.capsule("keeper", agent=KEEPER, authentication=KEEPER_AUTH)
    member = project.run("keeper", env=TOKENS)
    finished = say(member, "remember apples", TOKENS["ALICE_TOKEN"])
    live = say(member, "sleep 60", wait=False)
    support.wait_for(lambda: member.rpc("GetTask", {"id": live["id"]})["result"]["status"]
                     ["state"] == "TASK_STATE_WORKING")
    db_path = member.records / "tasks.db"

    def written() -> bool:
        with sqlite3.connect(db_path) as db:
            states = dict(db.execute("SELECT id, state FROM tasks").fetchall())
        return (states.get(finished["id"]) == "TASK_STATE_COMPLETED"
                and states.get(live["id"]) == "TASK_STATE_WORKING")

    support.wait_for(written)
    member.kill()
    return member.ready["session_id"], finished, live


def test_a_session_resumed_after_sigkill_answers_its_owners_and_fails_its_live_task(
        project: Project) -> None:
    session, finished, live = killed_with_tasks(project)
    again = project.run("keeper", "--resume", session, env=TOKENS)
    alice, bob = TOKENS["ALICE_TOKEN"], TOKENS["BOB_TOKEN"]

    kept = again.rpc("GetTask", {"id": finished["id"]}, token=alice)["result"]
    assert kept["status"]["state"] == "TASK_STATE_COMPLETED"
    assert answer_text(kept) == "noted remember apples"
    assert again.rpc("GetTask", {"id": finished["id"]}, token=bob)["error"]["code"] == -32001
    assert [t["id"] for t in again.rpc("ListTasks", {}, token=bob)["result"]["tasks"]] == []

    failed = again.rpc("GetTask", {"id": live["id"]})["result"]
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    reason = failed["status"]["message"]["parts"][0]["text"]
    assert "earlier session ended while this task was working" in reason

    # The conversation continues in alice's context; bob's message in it reads nothing.
    recalled = say(again, "recall", alice, context_id=str(finished["contextId"]))
    assert answer_text(recalled) == "remember apples|noted remember apples"
    assert answer_text(say(again, "recall", bob, context_id=str(finished["contextId"]))) == ""
    assert "task_state" in again.events()


def test_discard_tasks_starts_a_resumed_session_empty_and_keeps_the_file_aside(
        project: Project) -> None:
    session, finished, _ = killed_with_tasks(project)
    (db_path,) = (project.home / "records").rglob(f"{session}/tasks.db")
    db_path.write_bytes(b"SQLite format 3\x00" + b"not a page" * 500)
    again = project.run("keeper", "--resume", session, "--discard-tasks", env=TOKENS)
    assert again.rpc("GetTask", {"id": finished["id"]})["error"]["code"] == -32001
    (aside,) = db_path.parent.glob("tasks.db.discarded-*Z")   # (and its -wal, -shm)
    assert aside.read_bytes().endswith(b"not a page")
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
    assert "tasks_discarded" in again.events()


def test_discard_tasks_without_resume_is_a_usage_error(project: Project) -> None:
    project.capsule("echo")
    done = project.mur("run", "--capsule", "local/echo", "--capsule-version", "1.0.0",
                       "--project", str(project.path), "--discard-tasks", "--task", "hi")
    assert done.returncode == 2, done.stderr
    assert "--discard-tasks is taken with --resume only" in done.stderr


def heard(body: dict[str, object], seen: SeenRequest) -> Reply:
    messages = body["messages"]
    assert isinstance(messages, list)
    return text(f"heard <{messages[-1]['content']}>")


def test_a_model_member_resumed_continues_its_conversation_in_an_old_context(
        project: Project) -> None:
    with FakeOpenAI(heard) as fake:
        source = write_model_capsule(project.path.parent / "src", "talker", fake.base_url)
        install_capsule(project.path, source)
        member = project.run("talker", env={KEY_ENV: FAKE_KEY})
        first = say(member, "my name is Ada")
        assert answer_text(first) == "heard <my name is Ada>"
        support.wait_for(lambda: (member.records / "tasks.db").stat().st_size > 0)
        member.signal()
        assert member.wait() == 0
        again = project.run("talker", "--resume", member.ready["session_id"],
                            env={KEY_ENV: FAKE_KEY})
        later = say(again, "what is my name?", context_id=str(first["contextId"]))
        assert answer_text(later) == "heard <what is my name?>"
        fresh = say(again, "who am I?")
    conversation = fake.requests[1].body["messages"]
    assert [(m["role"], m["content"]) for m in conversation[1:]] == [
        ("user", "my name is Ada"), ("assistant", "heard <my name is Ada>"),
        ("user", "what is my name?")]
    assert [m["role"] for m in fake.requests[2].body["messages"]] == ["system", "user"]
    assert answer_text(fresh) == "heard <who am I?>"
