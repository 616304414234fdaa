"""``mur run --capsule`` as a real process, standalone: the readiness line, ``--task``,
the door, and every way a session ends (SIGTERM once and twice, idle, ``--deadline``,
CancelTask, a failed task), plus the refusals made before anything is staged."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support import member as support
from tests.support.member import Project, member_env, start_member, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


@pytest.fixture
def echo(project: Project) -> str:
    project.capsule("echo")
    return "echo"


def _session_end(records: list[dict[str, object]]) -> dict[str, object]:
    assert records[-1]["event"] == "session_end", records[-1]
    return records[-1]


# --------------------------------------------------------------------- readiness


def test_the_json_readiness_line_is_the_first_stdout_line_and_names_the_session(
        project: Project, echo: str) -> None:
    member = project.run(echo)
    ready = member.ready
    assert list(ready) == ["event", "session_id", "pid", "door_url", "grpc_url", "capsule",
                           "version", "records_dir"]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", ready["grpc_url"])
    assert ready["event"] == "ready" and ready["pid"] == member.pid
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", ready["door_url"])
    assert ready["capsule"] == "local/echo" and ready["version"] == "1.0.0"
    assert re.fullmatch(r"ses_[0-9a-f]{32}", ready["session_id"])
    records = Path(ready["records_dir"])
    assert records.name == ready["session_id"]
    assert (records / "operator.token").stat().st_mode & 0o777 == 0o600
    card = support.httpx.get(ready["door_url"] + "/.well-known/agent-card.json",
                             headers={"Authorization": f"Bearer {member.token}"}).json()
    params = card["capabilities"]["extensions"][0]["params"]
    assert params["sessionId"] == ready["session_id"]
    running = json.loads((project.home / "running" / f"{ready['session_id']}.json").read_text())
    assert running["pid"] == member.pid and running["door_url"] == ready["door_url"]
    member.signal()
    assert member.wait() == 0
    assert not (project.home / "running" / f"{ready['session_id']}.json").exists()


def test_the_human_readiness_line_names_the_door_the_session_and_the_token_file(
        project: Project, echo: str) -> None:
    process = project.start(echo, "--task", "hello", json_line=False)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    # A person's --task run: stdout is the answer alone; the readiness line is on stderr.
    assert out.decode() == "echo: hello\n"
    [first] = [line for line in err.decode().splitlines() if "is ready" in line]
    session = re.search(r"ses_[0-9a-f]{32}", first)
    assert session and re.search(r"http://127\.0\.0\.1:\d+", first)
    assert "operator.token" in first
    # the agent's print went to stderr too, never into the answer
    assert "noise from the agent" in err.decode()


# --------------------------------------------------------------------- --task


def test_a_task_runs_prints_its_result_and_ends_the_session_ok(project: Project,
                                                               echo: str) -> None:
    member = project.run(echo, "--task", "hello there")
    assert member.wait() == 0, member.stderr
    assert member.stdout == "echo: hello there\n"
    assert (member.records / "out" / "result.txt").read_text() == "echo: hello there\n"
    events = member.events()
    assert events[0] == "session_start" and "a2a_task_received" in events
    end = _session_end(member.trace())
    assert end["exit_status"] == "ok" and end["code"] is None
    assert member.trace()[0]["capsule"] == "local/echo"


def test_a_task_file_is_read_from_the_current_directory(project: Project, echo: str) -> None:
    (project.path / "task.md").write_text("from a file\n")
    member = project.run(echo, "--task", "task.md")
    assert member.wait() == 0
    assert member.stdout == "echo: from a file\n"


def test_the_task_is_a_task_on_the_door_that_list_tasks_shows_and_cancel_reaches(
        project: Project, echo: str) -> None:
    member = project.run(echo, "--task", "sleep 30")
    task_id = wait_for(lambda: support.running_task_ids(member))[0]
    canceled = member.rpc("CancelTask", {"id": task_id})
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert member.wait() == 1
    assert member.stdout.startswith("canceled:")
    assert support.codes(member.stderr) == ["E-RUN-041"]
    assert (member.records / "out" / "result.txt").read_text().startswith("canceled:")
    end = _session_end(member.trace())
    assert end["exit_status"] == "canceled" and end["code"] == "E-RUN-041"


def test_a_failed_task_fails_the_run_with_its_message(project: Project, echo: str) -> None:
    member = project.run(echo, "--task", "fail")
    assert member.wait() == 1
    assert member.stdout == "failed: RuntimeError: the agent gave up\n"
    assert support.codes(member.stderr) == ["E-RUN-041"]
    assert "Traceback" not in member.stderr
    assert _session_end(member.trace())["exit_status"] == "failed"


# --------------------------------------------------------------------- ending


def test_sigterm_while_a_task_runs_cancels_it_and_fails_with_e_run_040(
        project: Project, echo: str) -> None:
    member = project.run(echo, "--task", "sleep 30")
    wait_for(lambda: support.running_task_ids(member))
    member.signal(signal.SIGTERM)
    assert member.wait() == 1
    assert support.codes(member.stderr) == ["E-RUN-040"]
    assert member.stdout.startswith("canceled:")
    end = _session_end(member.trace())
    assert end["exit_status"] == "canceled" and end["code"] == "E-RUN-040"
    states = [r["state"] for r in member.trace() if r["event"] == "task_state"]
    assert states[-1] == "TASK_STATE_CANCELED"


def test_sigterm_when_idle_ends_ok(project: Project, echo: str) -> None:
    member = project.run(echo)
    member.signal(signal.SIGTERM)
    assert member.wait() == 0
    assert support.codes(member.stderr) == []
    end = _session_end(member.trace())
    assert end["exit_status"] == "ok" and end["code"] is None


def test_a_second_sigterm_exits_143_at_once(project: Project, echo: str) -> None:
    member = project.run(echo, "--task", "stubborn")
    wait_for(lambda: support.running_task_ids(member))
    member.signal(signal.SIGTERM)
    # the wind-down has begun (and waits for the stubborn agent)
    wait_for(lambda: "TASK_STATE_CANCELED" in json.dumps(member.trace()))
    started = time.monotonic()
    member.signal(signal.SIGTERM)
    assert member.wait(timeout=10) == 143
    assert time.monotonic() - started < 5


def test_the_deadline_ends_the_session_with_e_run_053(project: Project, echo: str) -> None:
    deadline = (datetime.now(UTC) + timedelta(seconds=2.5)).isoformat().replace(
        "+00:00", "Z")
    member = project.run(echo, "--task", "sleep 30", "--deadline", deadline)
    assert member.wait() == 1
    assert support.codes(member.stderr) == ["E-RUN-053"]
    records = member.trace()
    events = [r["event"] for r in records]
    assert events.index("deadline_reached") < events.index("session_end")
    end = _session_end(records)
    assert end["exit_status"] == "deadline_reached" and end["code"] == "E-RUN-053"
    assert member.stdout.startswith("canceled: the deadline was reached")


def test_stop_session_ends_an_idle_session_ok(project: Project, echo: str) -> None:
    member = project.run(echo)
    assert member.rpc("murmur.StopSession")["result"] == {"stopping": True}
    assert member.wait() == 0
    assert _session_end(member.trace())["reason"] == "stop_session"


def test_after_task_exit_ends_the_session_once_a_door_task_ended(project: Project) -> None:
    project.capsule("oneshot", lifecycle="after_task: exit")
    member = project.run("oneshot")
    answer = member.rpc("SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert member.wait() == 0
    end = _session_end(member.trace())
    assert end["exit_status"] == "ok" and end["reason"] == "after_task"
    assert (member.records / "out" / "result.txt").read_text() == "echo: hi\n"


def test_the_idle_timeout_ends_a_session_that_takes_no_task(project: Project) -> None:
    project.capsule("idle", lifecycle="idle_timeout: 1s")
    member = project.run("idle")
    assert member.wait(timeout=20) == 0
    assert _session_end(member.trace())["reason"] == "idle_timeout"


# --------------------------------------------------------------------- refusals


def _refusal(project: Project, *args: str, **env: str) -> tuple[int, str, str]:
    process = start_member(project.path, "local/echo", *args,
                           env=member_env(project.home, **env))
    out, err = process.communicate(timeout=30)
    return process.returncode, out.decode(), err.decode()


def test_a_changed_artifact_is_refused_with_e_run_047(project: Project, echo: str) -> None:
    code, out, err = _refusal(project, "--capsule-sha256", "0" * 64)
    assert code == 1 and out == ""
    assert "error E-RUN-047" in err
    assert not (project.home / "records").exists()


def test_the_bound_sha256_is_accepted(project: Project) -> None:
    sha256 = project.capsule("echo")
    member = project.run("echo", "--capsule-sha256", sha256, "--task", "ok")
    assert member.wait() == 0


def test_formation_peers_in_its_own_environment_is_refused(project: Project,
                                                          echo: str) -> None:
    code, out, err = _refusal(project, MURMUR_FORMATION_PEERS="x=http://x.formation.invalid")
    assert code == 1 and out == "" and "error E-RUN-046" in err
    assert not (project.home / "records").exists()


def test_a_channel_without_a_formation_id_is_refused(project: Project, echo: str) -> None:
    code, _, err = _refusal(project, MURMUR_FORMATION_CHANNEL="0")
    assert code == 1 and "error E-RUN-046" in err and "MURMUR_FORMATION_ID" in err


def test_a_channel_descriptor_that_is_not_open_is_refused(project: Project,
                                                          echo: str) -> None:
    formation_id, _ = support.new_formation()
    code, _, err = _refusal(project, MURMUR_FORMATION_ID=formation_id,
                            MURMUR_FORMATION_CHANNEL="97")
    assert code == 1 and "error E-RUN-046" in err and "not open" in err
    assert not (project.home / "records").exists()


def test_an_uninstalled_capsule_is_refused(project: Project) -> None:
    code, out, err = _refusal(project)
    assert code == 1 and out == "" and "error E-REG-001" in err


def test_usage_errors_exit_2(project: Project, echo: str) -> None:
    argv = [sys.executable, "-m", "launcher.cli", "run", "--capsule", "local/echo",
            "--project", str(project.path)]
    process = subprocess.run(argv, env=member_env(project.home), capture_output=True,
                             timeout=30, cwd=project.path, check=False)
    assert process.returncode == 2 and b"--capsule-version" in process.stderr
    code, _, err = _refusal(project, "--deadline", "soon")
    assert code == 2 and "--deadline" in err


def test_host_warnings_are_printed_once_unless_already_reported(project: Project,
                                                               echo: str) -> None:
    # An unsafe home (others may write it) is reported once by a standalone member.
    os.chmod(project.home, 0o777)  # noqa: S103 - the unsafe home this test is about
    try:
        code, _, err = _refusal(project, "--task", "x", MURMUR_HOST_WARNINGS_REPORTED="0")
        assert code == 0 and err.count("W-SEC-013") >= 1
        code, _, err = _refusal(project, "--task", "x")
        assert code == 0 and "W-SEC-013" not in err
    finally:
        os.chmod(project.home, 0o700)


def test_host_warnings_are_not_printed_before_a_refusal_about_something_else(
        project: Project) -> None:
    # The host's warning belongs to a run that starts, not to an uninstalled capsule.
    os.chmod(project.home, 0o777)  # noqa: S103 - the unsafe home this test is about
    try:
        code, _, err = _refusal(project, MURMUR_HOST_WARNINGS_REPORTED="0")
    finally:
        os.chmod(project.home, 0o700)
    assert code == 1 and "error E-REG-001" in err
    assert "W-SEC-013" not in err


# --------------------------------------------------------------------- secrets


def test_the_operator_token_is_only_in_operator_token(project: Project, echo: str) -> None:
    member = project.run(echo)
    token = member.token
    assert len(token) >= 40
    for name in ("cmdline", "environ"):
        assert token.encode() not in Path(f"/proc/{member.pid}/{name}").read_bytes()
    member.rpc("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER",
                                           "parts": [{"text": "hello"}]}})
    member.signal()
    assert member.wait() == 0
    assert token not in member.stdout and token not in member.stderr
    holders = [path for base in (project.home, project.path) for path in base.rglob("*")
               if path.is_file() and token.encode() in path.read_bytes()]
    assert holders == [member.records / "operator.token"]


def test_the_door_refuses_a_caller_without_the_operator_token(project: Project,
                                                            echo: str) -> None:
    member = project.run(echo)
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    for headers in ({"A2A-Version": "1.0"},
                    {"A2A-Version": "1.0",
                     "Authorization": "Bearer not-the-token-at-all-0123456789"}):
        response = support.httpx.post(member.door + "/", json=body, headers=headers)
        assert response.status_code == 401
    assert "tasks" in member.rpc("ListTasks")["result"]
    member.signal()
    assert member.wait() == 0


def test_resuming_a_session_this_folder_never_ran_is_refused(project: Project,
                                                             echo: str) -> None:
    code, out, err = _refusal(project, "--resume", "ses_0190a1b2c3d47e5f8a9b0c1d2e3f4a5b")
    assert code == 1 and out == ""
    assert support.codes(err) == ["E-RUN-044"] and "no session" in err


def test_resuming_a_session_of_another_capsule_is_refused(project: Project,
                                                          echo: str) -> None:
    project.capsule("other")
    first = project.run("other", "--task", "hi")
    assert first.wait() == 0
    code, _, err = _refusal(project, "--resume", first.ready["session_id"])
    assert code == 1 and support.codes(err) == ["E-RUN-044"] and "local/other" in err
