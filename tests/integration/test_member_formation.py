"""``mur run --capsule`` as a formation member, as real processes handed a formation
channel and a lifeline the way the launcher hands them: the lifeline's wind-down in every
row of docs/member-runtime.md's "How a session ends", the 143 watchdog, channel refusals,
a member started by hand, and two members calling each other through the formation
proxy."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.spawn.process import pid_alive, process_start_time
from tests.support import member as support
from tests.support.member import FDS_COMMAND as FDS
from tests.support.member import Channel, Member, Project, wait_for

pytestmark = pytest.mark.integration



@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def _channel(member: str = "coder", callees: tuple[str, ...] = (), *,
             lifeline: bool = True, entry: bool = False) -> Channel:
    formation_id, key = support.new_formation()
    channel = Channel(formation_id, key, member, callees, entry=entry,
                      with_lifeline=lifeline)
    channel.send_credentials()
    return channel


def _events(member: Member) -> list[str]:
    return member.events()


def _end(member: Member) -> dict[str, object]:
    records = member.trace()
    assert records[-1]["event"] == "session_end", records[-1]
    return records[-1]


# --------------------------------------------------------------------- in a formation


def test_a_member_reports_its_formation_and_names_it_on_session_start(
        project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    channel = _channel("coder")
    member = project.run("coder", channel=channel)
    assert member.ready["formation_id"] == channel.formation_id
    assert member.ready["member"] == "coder"
    start = member.trace()[0]
    assert start["event"] == "session_start"
    assert start["formation_id"] == channel.formation_id
    assert start["formation_member"] == "coder" and start["formation_callees"] == []
    channel.close_lifeline()
    assert member.wait() == 0
    assert "W-RUN-007" not in member.stderr


def test_the_lifeline_closing_while_a_task_runs_ends_formation_ended(
        project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    channel = _channel("coder", entry=True)
    member = project.run("coder", "--task", "sleep 30", channel=channel)
    wait_for(lambda: support.running_task_ids(member))
    channel.close_lifeline()
    assert member.wait() == 0
    assert support.codes(member.stderr) == []
    events = _events(member)
    ended = events.index("formation_ended")
    canceled = [i for i, r in enumerate(member.trace())
                if r.get("state") == "TASK_STATE_CANCELED"]
    assert canceled and ended < canceled[0]
    end = _end(member)
    assert end["exit_status"] == "formation_ended" and end["code"] is None
    assert member.trace()[ended]["formation_id"] == channel.formation_id
    assert (member.records / "out" / "result.txt").read_text() == \
        "canceled: the formation ended\n"


def test_the_lifeline_closing_when_idle_ends_ok(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    channel = _channel("coder")
    member = project.run("coder", channel=channel)
    channel.close_lifeline()
    assert member.wait() == 0
    assert _events(member).count("formation_ended") == 1
    assert _end(member)["exit_status"] == "ok"


def test_a_sigterm_after_the_lifeline_closed_changes_nothing(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    channel = _channel("coder", entry=True)
    member = project.run("coder", "--task", "linger 1", channel=channel)
    wait_for(lambda: support.running_task_ids(member))
    channel.close_lifeline()
    wait_for(lambda: "formation_ended" in _events(member))
    member.signal(signal.SIGTERM)
    assert member.wait() == 0
    assert support.codes(member.stderr) == []
    assert _end(member)["exit_status"] == "formation_ended"


def test_the_lifeline_closing_after_a_sigterm_changes_nothing(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    channel = _channel("coder", entry=True)
    member = project.run("coder", "--task", "linger 1", channel=channel)
    wait_for(lambda: support.running_task_ids(member))
    member.signal(signal.SIGTERM)
    wait_for(lambda: "TASK_STATE_CANCELED" in json.dumps(member.trace()))
    channel.close_lifeline()
    assert member.wait() == 1
    assert support.codes(member.stderr) == ["E-RUN-040"]
    assert "formation_ended" not in _events(member)
    assert _end(member)["exit_status"] == "canceled"


def test_the_member_exits_143_a_grace_after_the_lifeline_closed_wherever_it_is(
        project: Project) -> None:
    """The 20 s of docs/member-runtime.md, shortened for the test with
    MURMUR_TEST_LIFELINE_GRACE."""
    project.capsule("coder", peer_tasks=True)
    channel = _channel("coder", entry=True)
    member = project.run("coder", "--task", "stubborn", channel=channel,
                         env={"MURMUR_TEST_LIFELINE_GRACE": "1"})
    wait_for(lambda: support.running_task_ids(member))
    closed = time.monotonic()
    channel.close_lifeline()
    assert member.wait(timeout=15) == 143
    assert 0.9 <= time.monotonic() - closed < 8
    assert "formation_ended" in _events(member)


def test_the_deadline_wins_over_a_lifeline_closing_just_after(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    channel = _channel("coder", entry=True)
    member = project.run("coder", "--task", "linger 1", "--deadline", "1s", channel=channel)
    wait_for(lambda: "deadline_reached" in _events(member), timeout=15)
    channel.close_lifeline()
    assert member.wait() == 1
    assert support.codes(member.stderr) == ["E-RUN-053"]
    assert "formation_ended" not in _events(member)
    assert _end(member)["exit_status"] == "deadline_reached"


_LAUNCHER = """
import json, os, subprocess, sys, time
spec = json.loads(sys.argv[1])
child = subprocess.Popen(spec["argv"], env=spec["env"], cwd=spec["cwd"],
                         pass_fds=spec["fds"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
for fd in spec["fds"]:
    os.close(fd)
sys.stdout.write(child.stdout.readline().decode())
sys.stdout.flush()
time.sleep(3600)
"""


def test_a_peer_whose_launcher_died_writes_to_its_bootstrap_log(project: Project) -> None:
    """A stand-in launcher holds the lifeline and reads the peer's stderr; it is killed."""
    project.capsule("coder", peer_tasks=True)
    channel = _channel("coder")
    assert channel.lifeline is not None
    env = support.member_env(project.home, **channel.env())
    argv = [sys.executable, "-m", "launcher.cli", "run", "--capsule", "local/coder",
            "--capsule-version", "1.0.0", "--project", str(project.path), "--json",
            "--task", "linger-say"]
    spec = {"argv": argv, "env": env, "cwd": str(project.path), "fds": list(channel.pass_fds)}
    launcher = support.subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, json.dumps(spec)],
        pass_fds=(*channel.pass_fds, channel.lifeline.parent_fd),
        stdout=support.subprocess.PIPE, stdin=support.subprocess.DEVNULL)
    channel.started()
    channel.lifeline.close_parent_end()  # only the stand-in launcher holds it now
    member_pid, member_start = None, None
    try:
        member = support.read_ready(launcher)  # its readiness line, relayed
        member_pid = member.ready["pid"]
        member_start = process_start_time(member_pid)
        records = member.records
        wait_for(lambda: support.running_task_ids(member))
        launcher.kill()
        launcher.wait(10)
        wait_for(lambda: records.joinpath("trace.jsonl").read_text().rstrip().endswith("}")
                 and member.trace()[-1]["event"] == "session_end", timeout=20)
        assert member.trace()[-1]["exit_status"] == "formation_ended"
        log = records / "logs" / "bootstrap.log"
        wait_for(log.exists)
        assert "late words after the launcher" in log.read_text()
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
        if member_pid is not None and pid_alive(member_pid, member_start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(member_pid, signal.SIGKILL)


# --------------------------------------------------------------------- refusals


def test_a_channel_of_another_formation_is_refused(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    channel = _channel("coder")
    other, _ = support.new_formation()
    process = project.start("coder", channel=channel, env={"MURMUR_FORMATION_ID": other})
    out, err = process.communicate(timeout=30)
    assert process.returncode == 1 and out == b""
    assert support.codes(err.decode()) == ["E-RUN-046"]
    assert not (project.home / "records").exists()


def test_a_token_not_issued_to_this_member_is_refused(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    formation_id, key = support.new_formation()
    channel = Channel(formation_id, key, "coder", ("reviewer",))
    channel.tokens["reviewer"] = key.mint(formation=formation_id, caller="planner",
                                          callee="reviewer")
    channel.send_credentials()
    process = project.start("coder", channel=channel)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 1 and out == b""
    assert support.codes(err.decode()) == ["E-RUN-046"]
    assert "mft1." not in err.decode()


def test_a_first_line_that_is_not_credentials_is_refused(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    formation_id, key = support.new_formation()
    channel = Channel(formation_id, key, "coder")
    support.os.write(channel.channel.parent_fd, b'{"doors": {}}\n')
    process = project.start("coder", channel=channel)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1 and support.codes(err.decode()) == ["E-RUN-046"]


def test_a_member_started_by_hand_warns_w_run_007_and_runs(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    formation_id, _ = support.new_formation()
    member = project.run("coder", "--task", "who",
                         env={"MURMUR_FORMATION_ID": formation_id})
    assert member.wait() == 0
    assert support.codes(member.stderr) == ["W-RUN-007"]
    assert member.ready["formation_id"] == formation_id
    assert "member" not in member.ready       # it holds no roster name
    assert member.trace()[0]["formation_id"] == formation_id
    assert member.stdout.startswith("operator/trusted/None/" + formation_id)


def test_a_resumed_session_takes_no_formation_part(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    first = project.run("coder", "--task", "hi")
    assert first.wait() == 0
    channel = _channel("coder")
    resumed = project.run("coder", "--resume", first.ready["session_id"], "--task", "who",
                          channel=channel)
    assert resumed.wait() == 0
    assert support.codes(resumed.stderr) == []
    assert "formation_id" not in resumed.ready
    assert resumed.ready["session_id"] == first.ready["session_id"]
    starts = [r for r in resumed.trace() if r["event"] == "session_start"]
    assert len(starts) == 2 and "formation_id" not in starts[1]
    assert resumed.stdout.startswith("operator/trusted/None/None")


# --------------------------------------------------------------------- calls


def test_two_members_call_each_other_along_their_edge_only(project: Project) -> None:
    project.capsule("coder", peer_tasks=True)
    project.capsule("planner")
    formation_id, key = support.new_formation()
    coder_channel = Channel(formation_id, key, "coder")
    coder_channel.send_credentials()
    coder = project.run("coder", channel=coder_channel)
    planner_channel = Channel(formation_id, key, "planner", ("coder",), entry=True)
    planner_channel.send_credentials()
    planner_channel.writer.write_doors({"coder": coder.door})
    planner = project.run("planner", "--task", "call coder who", channel=planner_channel)
    assert planner.wait() == 0, planner.stderr
    assert planner.stdout == f"coder said: peer/trusted/coder/{formation_id}\n"
    calls = [r for r in planner.trace() if r["event"] == "member_call"]
    assert calls and calls[0]["callee"] == "coder"
    assert calls[0]["url"] == "http://coder.formation.invalid"
    received = [r for r in coder.trace() if r["event"] == "a2a_task_received"]
    assert received[0]["formation_member"] == "planner"
    assert received[0]["credential"] == "member:planner"
    # the coder holds no token for the planner: its own call is refused before sending
    coder_channel.close_lifeline()
    assert coder.wait() == 0
    tokens = list(planner_channel.tokens.values())
    for text in (planner.stdout, planner.stderr, coder.stdout, coder.stderr):
        assert "mft1." not in text
    for base in (project.home, project.path):
        for path in base.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert not any(token.encode() in data for token in tokens), path


def test_a_callers_task_env_names_its_callees_and_nothing_else(project: Project) -> None:
    project.capsule("planner", env_allow=("GREETING",))
    channel = _channel("planner", ("coder", "reviewer"), entry=True)
    member = project.run("planner", "--task", "env", channel=channel,
                         env={"GREETING": "hi", "SECRET_OF_THE_RUNTIME": "no"})
    for name in ("cmdline", "environ"):
        data = Path(f"/proc/{member.pid}/{name}").read_bytes()
        assert b"mft1." not in data
    assert member.wait() == 0
    assert member.stdout == ("GREETING=hi MURMUR_FORMATION_PEERS="
                             "coder=http://coder.formation.invalid "
                             "reviewer=http://reviewer.formation.invalid\n")


def test_a_member_leaves_w_run_008_to_its_launcher(project: Project) -> None:
    # The launcher prints W-RUN-008 once at launch
    # (tests/launcher/formation/test_launch.py); a member repeating it would print it
    # twice for every launch.
    project.capsule("planner", allow=("api.example.com",))
    channel = _channel("planner", ("coder",), entry=True)
    member = project.run("planner", "--task", "hi", channel=channel)
    assert member.wait() == 0
    assert "W-RUN-008" not in member.stderr


def test_a_command_agent_inherits_neither_channel_nor_lifeline(project: Project) -> None:
    project.capsule("tool", command=(sys.executable, "-c", FDS))
    channel = _channel("tool", ("coder",), entry=True)
    member = project.run("tool", "--task", "anything", channel=channel)
    assert member.wait() == 0, member.stderr
    fds = set(member.stdout.split())
    assert fds <= {"0", "1", "2", "3"}, fds
