"""A member's whole session in-process (real uvicorn on 127.0.0.1, a real installed
capsule, no signals installed): staging, readiness, --task, each ending, start failures,
and a full disk (``os.write`` failing with ENOSPC for the session's files)."""

from __future__ import annotations

import asyncio
import errno
import io
import itertools
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.admission.store import install, pack, resolve
from launcher.home.paths import running_dir
from launcher.home.trace import read_trace
from launcher.ids import new_formation_id, new_session_id
from launcher.member import session_serve, session_start
from launcher.member.options import MemberOptions
from launcher.member.place import FormationPlace
from launcher.member.session import MemberSession, SessionPlan
from launcher.member.shutdown import FORCED_EXIT, ProtocolOut

AGENT = '''
import asyncio

async def run(task):
    if task.text.startswith("sleep "):
        await asyncio.sleep(float(task.text.split()[1]))
    if task.text == "fail":
        raise RuntimeError("no luck")
    return "done: " + task.text
'''

_names = itertools.count()


def install_capsule(tmp_path: Path, *, agent: str = AGENT, extra: str = "",
                    authentication: str = "{}") -> tuple[Path, str]:
    """A capsule with a module name of its own (this process imports each once)."""
    number = next(_names)
    name, module = f"unit{number}", f"unit_session_agent_{os.getpid()}_{number}"
    source = tmp_path / "src" / name
    source.mkdir(parents=True)
    (source / f"{module}.py").write_text(agent)
    (source / "murmur.yaml").write_text(
        f"manifest_version: 1\nname: {name}\nversion: 1.0.0\nagent:\n  python: {module}:run\n"
        f"network:\n  authentication: {authentication}\n{extra}")
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    packed = pack(source, tmp_path / f"{name}.mur.zip")
    install(packed.path, project)
    return project, f"local/{name}"


class Stdout:
    """A pipe standing in for the member's stdout."""

    def __init__(self) -> None:
        self.read_end, write_end = os.pipe()
        err_read, err_write = os.pipe()
        self._fake = os.dup(write_end)
        self.out = ProtocolOut(stdout_fd=self._fake, stderr_fd=err_write)
        for fd in (write_end, err_read, err_write):
            os.close(fd)

    def lines(self) -> list[str]:
        self.out.close()
        os.close(self._fake)
        data = b""
        while chunk := os.read(self.read_end, 65536):
            data += chunk
        os.close(self.read_end)
        return data.decode().splitlines()


def plan(tmp_path: Path, *, task: str | None = None, deadline: datetime | None = None,
         place: FormationPlace | None = None, json_line: bool = True,
         exits: list[int] | None = None, environ: dict[str, str] | None = None,
         **capsule: Any) -> SessionPlan:
    project, name = install_capsule(tmp_path, **capsule)
    options = MemberOptions(capsule=name, version="1.0.0", sha256=None, project=project,
                            task=task, deadline=deadline, task_acceptance=None,
                            after_task=None, resume=None, json=json_line)
    return SessionPlan(options=options, artifact=resolve(project, name, "1.0.0"),
                       place=place or FormationPlace(), session_id=new_session_id(),
                       workdir=project, environ=environ or {}, launcher_pid=os.getppid(),
                       lifeline_grace=0.2, install_signals=False,
                       exit_fn=(exits if exits is not None else []).append,
                       diagnostics=io.StringIO())


def trace_of(session: MemberSession) -> list[dict[str, Any]]:
    assert session.records is not None
    return read_trace(session.records.trace)


def events(session: MemberSession) -> list[str]:
    return [record["event"] for record in trace_of(session)]


@pytest.fixture
def stdout() -> Iterator[Stdout]:
    yield Stdout()


async def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


# --------------------------------------------------------------------- a task run


async def test_a_task_run_stages_serves_reports_and_ends_ok(tmp_path: Path,
                                                           stdout: Stdout) -> None:
    session = MemberSession(plan(tmp_path, task="hello"), stdout.out)
    outcome = await session.run()
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (0, "ok", None)
    ready, result = stdout.lines()
    line = json.loads(ready)
    assert line["session_id"] == session.plan.session_id
    assert line["door_url"] == session.door_url
    assert result == "done: hello"
    assert session.records is not None
    assert session.records.result.read_text() == "done: hello\n"
    assert session.records.operator_token.stat().st_mode & 0o777 == 0o600
    names = events(session)
    assert names[0] == "session_start" and names[-1] == "session_end"
    assert trace_of(session)[-1]["reason"] == "task"
    assert not (running_dir() / f"{session.plan.session_id}.json").exists()


async def test_a_failed_task_ends_failed_with_its_message(tmp_path: Path,
                                                         stdout: Stdout) -> None:
    session = MemberSession(plan(tmp_path, task="fail"), stdout.out)
    outcome = await session.run()
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (1, "failed", "E-RUN-041")
    assert stdout.lines()[-1] == "failed: RuntimeError: no luck"
    diagnostics = session.plan.diagnostics.getvalue()
    assert "E-RUN-041" in diagnostics and "no luck" in diagnostics


# --------------------------------------------------------------------- endings


async def test_a_signal_while_a_task_runs_cancels_it(tmp_path: Path, stdout: Stdout) -> None:
    session = MemberSession(plan(tmp_path, task="sleep 30"), stdout.out)
    running = asyncio.create_task(session.run())
    await wait_until(lambda: session.running_tasks())
    session._on_signal(15)
    outcome = await running
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (1, "canceled",
                                                                      "E-RUN-040")
    assert stdout.lines()[-1] == "canceled: the session was stopped by SIGTERM"


async def test_stop_session_from_the_operator_ends_an_idle_session(tmp_path: Path,
                                                                  stdout: Stdout) -> None:
    session = MemberSession(plan(tmp_path), stdout.out)
    running = asyncio.create_task(session.run())
    await wait_until(lambda: session.records is not None and session.door is not None
                     and session._server is not None and session._server.started)
    assert session.records is not None
    token = session.records.operator_token.read_text()
    async with httpx.AsyncClient() as client:
        answer = await client.post(session.door_url + "/", json={
            "jsonrpc": "2.0", "id": 1, "method": "murmur.StopSession", "params": {}},
            headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"})
    assert answer.json()["result"] == {"stopping": True}
    outcome = await running
    assert (outcome.exit_code, outcome.exit_status) == (0, "ok")
    assert trace_of(session)[-1]["reason"] == "stop_session"


async def test_a_deadline_already_past_ends_at_once(tmp_path: Path, stdout: Stdout) -> None:
    past = datetime.now(UTC) - timedelta(seconds=1)
    session = MemberSession(plan(tmp_path, task="sleep 30", deadline=past), stdout.out)
    outcome = await asyncio.wait_for(session.run(), 20)
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (
        1, "deadline_reached", "E-RUN-053")
    names = events(session)
    assert names.index("deadline_reached") < names.index("session_end")


async def test_the_lifeline_ends_the_session_formation_ended_and_arms_the_watchdog(
        tmp_path: Path, stdout: Stdout, monkeypatch: pytest.MonkeyPatch) -> None:
    diverted: list[Path] = []
    monkeypatch.setattr(session_serve, "launcher_gone", lambda pid: True)
    monkeypatch.setattr(session_serve, "divert_stderr_to", diverted.append)
    read_end, write_end = os.pipe()
    exits: list[int] = []
    formation = new_formation_id()
    place = FormationPlace(formation_id=formation, lifeline=read_end)
    session = MemberSession(plan(tmp_path, task="sleep 30", place=place, exits=exits),
                            stdout.out)
    running = asyncio.create_task(session.run())
    await wait_until(lambda: session.running_tasks())
    os.close(write_end)
    outcome = await running
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (0, "formation_ended",
                                                                      None)
    records = trace_of(session)
    ended = [i for i, r in enumerate(records) if r["event"] == "formation_ended"]
    canceled = [i for i, r in enumerate(records) if r.get("state") == "TASK_STATE_CANCELED"]
    assert ended and canceled and ended[0] < canceled[0]
    assert records[ended[0]]["formation_id"] == formation
    await asyncio.sleep(0.3)  # the watchdog's grace in this plan is 0.2 s
    assert exits == [FORCED_EXIT]
    assert session.records is not None and diverted == [session.records.bootstrap_log]
    assert stdout.lines()[-1] == "canceled: the formation ended"


async def test_the_idle_timeout_ends_a_quiet_session(tmp_path: Path, stdout: Stdout) -> None:
    session = MemberSession(plan(tmp_path, extra="lifecycle: {idle_timeout: 1s}\n"),
                            stdout.out)
    outcome = await asyncio.wait_for(session.run(), 20)
    assert (outcome.exit_code, outcome.exit_status) == (0, "ok")
    assert trace_of(session)[-1]["reason"] == "idle_timeout"


# --------------------------------------------------------------------- start failures


async def test_an_agent_that_does_not_import_fails_with_e_run_043(tmp_path: Path,
                                                                 stdout: Stdout) -> None:
    session = MemberSession(plan(tmp_path, task="x", agent="raise ImportError('broken')\n"),
                            stdout.out)
    outcome = await session.run()
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (1, "failed",
                                                                      "E-RUN-043")
    assert stdout.lines() == []  # never ready
    end = trace_of(session)[-1]
    assert end["event"] == "session_end" and end["code"] == "E-RUN-043"
    assert not (running_dir() / f"{session.plan.session_id}.json").exists()


async def test_a_missing_bearer_variable_fails_with_e_run_042(tmp_path: Path,
                                                             stdout: Stdout) -> None:
    authentication = "{bearer: [{name: ci, env: CI_TOKEN}]}"
    session = MemberSession(plan(tmp_path, task="x", authentication=authentication),
                            stdout.out)
    outcome = await session.run()
    assert (outcome.exit_code, outcome.code) == (1, "E-RUN-042")
    assert "CI_TOKEN" in session.plan.diagnostics.getvalue()
    assert trace_of(session)[-1]["code"] == "E-RUN-042"


async def test_a_declared_bearer_is_let_in(tmp_path: Path, stdout: Stdout) -> None:
    authentication = "{bearer: [{name: ci, env: CI_TOKEN}]}"
    session = MemberSession(plan(tmp_path, authentication=authentication,
                                 environ={"CI_TOKEN": "ci-token-0123456789abcdef"}),
                            stdout.out)
    running = asyncio.create_task(session.run())
    await wait_until(lambda: session._server is not None and session._server.started)
    async with httpx.AsyncClient() as client:
        answer = await client.post(session.door_url + "/", json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}},
            headers={"Authorization": "Bearer ci-token-0123456789abcdef",
                     "A2A-Version": "1.0"})
    assert answer.json()["result"]["task"]["artifacts"][0]["parts"][0]["text"] == "done: hi"
    session._on_signal(15)
    outcome = await running
    assert (outcome.exit_code, outcome.exit_status) == (0, "ok")
    received = [r for r in trace_of(session) if r["event"] == "a2a_task_received"]
    assert received[0]["credential"] == "bearer:ci" and received[0]["trust"] == "untrusted"


# --------------------------------------------------------------------- a full disk


def full_disk(patch: pytest.MonkeyPatch, where: Callable[[str], bool],
              code: int = errno.ENOSPC) -> list[str]:
    """``os.write`` fails with ``code`` for every descriptor whose file ``where`` picks,
    as a full disk would; returns the paths refused."""
    real_write = os.write
    refused: list[str] = []

    def write(fd: int, data: Any) -> int:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if where(target):
            refused.append(target)
            raise OSError(code, os.strerror(code))
        return real_write(fd, data)

    patch.setattr(os, "write", write)
    return refused


def errors_of(session: MemberSession, code: str) -> list[str]:
    """The messages of the diagnostics ``code`` the session printed (one JSON a line)."""
    printed = [json.loads(line) for line in session.plan.diagnostics.getvalue().splitlines()]
    return [entry["message"] for entry in printed if entry["code"] == code]


async def send_task(client: httpx.AsyncClient, session: MemberSession, token: str,
                    text: str) -> str:
    answer = await client.post(session.door_url + "/", json={
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": text, "role": "ROLE_USER", "parts": [{"text": text}]}}},
        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"})
    task = answer.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    return str(task["artifacts"][0]["parts"][0]["text"])


async def test_a_full_disk_for_result_txt_fails_the_task_run_with_e_run_048_and_no_debris(
        tmp_path: Path, stdout: Stdout, monkeypatch: pytest.MonkeyPatch) -> None:
    refused = full_disk(monkeypatch, lambda path: "/out/.result.txt." in path)
    session = MemberSession(plan(tmp_path, task="hello"), stdout.out)
    outcome = await session.run()
    assert refused
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (1, "failed", "E-RUN-048")
    assert stdout.lines()[-1] == "done: hello"  # the answer is still printed
    assert session.records is not None
    assert os.listdir(session.records.out) == []  # no result.txt, no temporary file
    [error] = errors_of(session, "E-RUN-048")  # said once, though written twice
    assert f"the task's result cannot be written to {session.records.result}" in error
    assert "no space left on the device (disk full)" in error
    assert "fault in mur" not in session.plan.diagnostics.getvalue()
    end = trace_of(session)[-1]
    assert (end["event"], end["exit_status"], end["code"]) == ("session_end", "failed",
                                                                "E-RUN-048")


async def test_a_full_disk_between_two_tasks_removes_the_stale_result_and_keeps_serving(
        tmp_path: Path, stdout: Stdout, monkeypatch: pytest.MonkeyPatch) -> None:
    session = MemberSession(plan(tmp_path), stdout.out)
    running = asyncio.create_task(session.run())
    await wait_until(lambda: session._server is not None and session._server.started)
    records = session.records
    assert records is not None
    token = records.operator_token.read_text()
    inside = os.path.realpath(records.dir) + os.sep
    async with httpx.AsyncClient() as client:
        assert await send_task(client, session, token, "first") == "done: first"
        assert records.result.read_text() == "done: first\n"
        with monkeypatch.context() as patch:
            refused = full_disk(patch, lambda path: path.startswith(inside))
            assert await send_task(client, session, token, "second") == "done: second"
            assert not records.result.exists()  # never the first task's answer
            assert await send_task(client, session, token, "third") == "done: third"
        assert refused
        assert [name for name in os.listdir(records.out) if name != "result.txt"] == []
        errors = errors_of(session, "E-RUN-048")
        assert len(errors) == 2, errors  # once for result.txt, once for the trace
        assert any(f"written to {records.result}: no space left on the device (disk full)"
                   in error for error in errors)
        assert any(f"written to {records.trace}: no space left" in error for error in errors)
        # Space again: the next task's answer is written, and nothing more is reported.
        assert await send_task(client, session, token, "fourth") == "done: fourth"
        assert records.result.read_text() == "done: fourth\n"
    session._on_signal(15)
    outcome = await running
    assert (outcome.exit_code, outcome.exit_status) == (0, "ok")
    assert len(errors_of(session, "E-RUN-048")) == 2
    assert trace_of(session)[-1]["event"] == "session_end"


async def test_a_full_disk_while_staging_names_the_token_file_and_leaves_no_part_of_it(
        tmp_path: Path, stdout: Stdout, monkeypatch: pytest.MonkeyPatch) -> None:
    full_disk(monkeypatch, lambda path: path.endswith("/operator.token"))
    session = MemberSession(plan(tmp_path, task="x"), stdout.out)
    outcome = await session.run()
    assert (outcome.exit_code, outcome.exit_status, outcome.code) == (1, "failed", "E-RUN-048")
    assert stdout.lines() == []
    assert session.records is not None
    assert not session.records.operator_token.exists()
    [error] = errors_of(session, "E-RUN-048")
    assert f"written to {session.records.operator_token}: no space left" in error
    assert not (running_dir() / f"{session.plan.session_id}.json").exists()


@pytest.mark.parametrize(("code", "words"), [
    (errno.ENOSPC, "no space left on the device (disk full)"),
    (errno.EDQUOT, "the disk quota is exceeded (disk full for this user)"),
])
async def test_a_full_disk_for_the_running_record_says_so_and_leaves_no_tmp(
        tmp_path: Path, stdout: Stdout, monkeypatch: pytest.MonkeyPatch, code: int,
        words: str) -> None:
    full_disk(monkeypatch, lambda path: "/running/." in path, code)
    session = MemberSession(plan(tmp_path, task="x"), stdout.out)
    outcome = await session.run()
    assert (outcome.exit_code, outcome.code) == (1, "E-RUN-048")
    record = running_dir() / f"{session.plan.session_id}.json"
    [error] = errors_of(session, "E-RUN-048")
    assert f"the running record cannot be written to {record}: {words}" in error
    assert "free space on the disk" in session.plan.diagnostics.getvalue()
    assert os.listdir(running_dir()) == []


async def test_a_full_disk_while_unpacking_the_capsule_is_not_called_a_fault_in_mur(
        tmp_path: Path, stdout: Stdout, monkeypatch: pytest.MonkeyPatch) -> None:
    def unpack_until_full(artifact: Any, dest: Path) -> Path:
        dest.mkdir(mode=0o700)
        (dest / "agent.py").write_text("half of it")
        # Raised as a buffered write raises it: naming no file.
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(session_start, "unpack", unpack_until_full)
    session = MemberSession(plan(tmp_path, task="x"), stdout.out)
    outcome = await session.run()
    assert (outcome.exit_code, outcome.code) == (1, "E-RUN-048")
    assert session.records is not None
    capsule = session.records.dir / "capsule"
    assert not capsule.exists()
    [error] = errors_of(session, "E-RUN-048")
    assert f"the capsule cannot be written to {capsule}: no space left" in error
    assert "fault in mur" not in session.plan.diagnostics.getvalue()
    assert trace_of(session)[-1]["code"] == "E-RUN-048"


async def test_a_folder_planted_as_result_txt_fails_the_rename_and_leaves_no_tmp(
        tmp_path: Path, stdout: Stdout) -> None:
    session = MemberSession(plan(tmp_path), stdout.out)
    running = asyncio.create_task(session.run())
    await wait_until(lambda: session._server is not None and session._server.started)
    records = session.records
    assert records is not None
    records.result.mkdir()  # as agent code could, in the out/ it writes
    async with httpx.AsyncClient() as client:
        answer = await send_task(client, session, records.operator_token.read_text(), "hi")
    session._on_signal(15)
    await running
    assert answer == "done: hi"
    assert os.listdir(records.out) == ["result.txt"] and records.result.is_dir()
    [error] = errors_of(session, "E-RUN-048")
    assert f"the task's result cannot be written to {records.result}: Is a directory" in error
