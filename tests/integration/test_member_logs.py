"""An agent's exception: its traceback in the member's own log (``logs/member.log``),
its reason on the trace's ``task_state`` record, and ``mur logs`` printing it, once or
following until the session ends."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import member as support
from tests.support.member import Project, member_env

pytestmark = pytest.mark.integration

FAILING_AGENT = """
def lookup(table, key):
    return table[key]


async def run(task):
    if task.text == "fail":
        return lookup({}, "missing-key")
    return "fine"
"""


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)



def fail_a_task(member: support.Member) -> dict[str, object]:
    answer = member.rpc("SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "fail"}]}})
    task: dict[str, object] = answer["result"]["task"]
    return task


def test_an_agents_exception_is_logged_with_its_traceback_and_traced_with_its_reason(
        project: Project) -> None:
    project.capsule("boom", agent=FAILING_AGENT)
    member = project.run("boom")
    task = fail_a_task(member)
    status = task["status"]
    assert isinstance(status, dict) and status["state"] == "TASK_STATE_FAILED"
    # The type, then the text, as Python's own last traceback line.
    assert status["message"]["parts"] == [{"text": "KeyError: 'missing-key'"}]
    log = (member.records / "logs" / "member.log").read_text()
    assert "Traceback (most recent call last)" in log
    assert "boom_agent.py" in log and "in lookup" in log and "KeyError: 'missing-key'" in log
    # Its source is not in the project: the copy is named, and said to be the installed one.
    copy = (member.records / "capsule").resolve()
    assert f'File "{copy / "boom_agent.py"}"' in log
    assert f"(files under {copy} are the installed local/boom 1.0.0; the project holds " \
           "no source of it)" in log
    assert member.token not in log
    assert (member.records / "logs" / "member.log").stat().st_mode & 0o077 == 0
    [failed] = [record for record in member.trace() if record["event"] == "task_state"
                and record.get("state") == "TASK_STATE_FAILED"]
    assert "missing-key" in str(failed["reason"])
    printed = project.mur("logs", str(member.ready["session_id"]))
    assert printed.returncode == 0, printed.stderr
    session = member.ready["session_id"]
    assert f"[{session}] Traceback (most recent call last)" in printed.stdout
    member.signal()
    assert member.wait() == 0


def test_an_agents_traceback_names_the_projects_source_file(project: Project) -> None:
    source = support.write_capsule(project.path / "boom", "boom", agent=FAILING_AGENT)
    support.install_capsule(project.path, source)
    member = project.run("boom")
    fail_a_task(member)
    log = (member.records / "logs" / "member.log").read_text()
    assert f'File "{source.resolve() / "boom_agent.py"}", line 3, in lookup' in log
    assert str(member.records / "capsule") not in log and "files under" not in log


def test_mur_logs_follow_prints_new_lines_until_the_session_ends(project: Project) -> None:
    project.capsule("boom", agent=FAILING_AGENT)
    member = project.run("boom")
    session = str(member.ready["session_id"])
    follower = subprocess.Popen([sys.executable, "-m", "launcher.cli", "logs", session,
                                 "--follow"], env=member_env(project.home),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        fail_a_task(member)
        member.signal()
        assert member.wait() == 0
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert "KeyError: 'missing-key'" in out


PRINTING_AGENT = """
import logging
import sys


async def run(task):
    print(f"print says {task.text}")
    print("stderr says hi", file=sys.stderr)
    logging.getLogger("my.agent").warning("logging says careful")
    return "done"
"""


def test_what_an_agent_prints_is_kept_and_shown_after_the_session_ended(
        project: Project) -> None:
    project.capsule("talker", agent=PRINTING_AGENT)
    member = project.run("talker")
    answer = member.rpc("SendMessage", {"message": {
        "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}})
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    member.signal()
    assert member.wait() == 0
    session = str(member.ready["session_id"])
    printed = project.mur("logs", session)
    assert printed.returncode == 0, printed.stderr
    for said in ("print says hello", "stderr says hi", "logging says careful"):
        assert f"[{session}] " in printed.stdout and said in printed.stdout, printed.stdout
    kept = (member.records / "logs" / "output.log")
    assert kept.stat().st_mode & 0o077 == 0 and "agent print says hello" in kept.read_text()
    as_json = project.mur("logs", session, "--json", "--timestamps")
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    [row] = [row for row in rows if row["text"] == "print says hello"]
    assert row["source"] == "agent" and row["session"] == session
    assert row["time"].endswith("Z")
    later = project.mur("logs", session, "--since", "2999-01-01T00:00:00Z")
    assert later.returncode == 0 and later.stdout == ""
    last = project.mur("logs", session, "--tail", "1", "-t")
    assert len(last.stdout.splitlines()) == 1
    assert last.stdout.startswith(f"[{session}] 20"), last.stdout
    wrong = project.mur("logs", session, "--since", "yesterday")
    assert wrong.returncode == 2 and "--since `yesterday`" in wrong.stderr


def test_mur_logs_of_nothing_says_so(project: Project) -> None:
    done = project.mur("logs", "ses_0190c0de00007000800000000000f00d")
    assert done.returncode == 1 and "no records of session" in done.stderr
