"""The launcher's pieces in-process: deadlines, the readiness line, the agent card check,
a member's argv and environment, W-RUN-008, the formation line, and the refusals of
``mur run --roster`` that start nothing."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.auth.tokens import FormationKey
from launcher.admission.reach import reach_warnings
from launcher.admission.roster import admit
from launcher.admission.store import install, pack
from launcher.durations import format_deadline, parse_deadline
from launcher.formation import launch as formation
from launcher.formation import members as formation_members
from launcher.formation.ending import exit_status
from launcher.formation.output import formation_line, render_table
from launcher.formation.ready import (
    NotReady,
    card_names_session,
    loopback_door,
    parse_ready_line,
    ready_seconds,
)
from launcher.home import formations, paths, running_records
from launcher.ids import new_formation_id, new_session_id
from launcher.member.options import parse_deadline as member_parse_deadline

NOW = datetime(2026, 10, 23, 21, 44, 57, tzinfo=UTC)


# --------------------------------------------------------------------------- deadlines


def test_a_duration_deadline_counts_from_the_launchers_start() -> None:
    assert parse_deadline("90s", NOW) == NOW + timedelta(seconds=90)
    assert parse_deadline("10m", NOW) == NOW + timedelta(minutes=10)


def test_an_iso_deadline_is_taken_as_utc() -> None:
    assert parse_deadline("2026-10-23T22:00:00Z", NOW) == datetime(2026, 10, 23, 22,
                                                                   tzinfo=UTC)
    assert parse_deadline("2026-10-23T22:00:00", NOW).tzinfo is not None


def test_a_deadline_that_is_neither_is_refused_with_both_forms_named() -> None:
    with pytest.raises(ValueError, match="neither a duration"):
        parse_deadline("tomorrow", NOW)


def test_the_absolute_deadline_handed_to_members_parses_back_to_the_same_moment() -> None:
    moment = NOW + timedelta(seconds=3, microseconds=250)
    text = format_deadline(moment)
    assert text.endswith("Z")
    assert member_parse_deadline(text) == moment


def test_exit_status_of_a_signalled_member_is_128_plus_the_signal() -> None:
    assert exit_status(-9) == 137
    assert exit_status(0) == 0
    assert exit_status(1) == 1


# --------------------------------------------------------------------------- readiness


def ready_line(**changes: Any) -> bytes:
    fid = changes.pop("formation", FID)
    session = changes.pop("session", SESSION)
    line: dict[str, Any] = {
        "event": "ready", "session_id": session, "pid": 4242,
        "door_url": "http://127.0.0.1:41234", "capsule": "local/coder", "version": "1.0.0",
        "records_dir": str(paths.records_root() / "x" / session),
        "formation_id": fid, "member": "coder"}
    for key, value in changes.items():
        if value is None:
            line.pop(key, None)
        else:
            line[key] = value
    return json.dumps(line).encode()


FID = new_formation_id()
SESSION = new_session_id()


@pytest.mark.parametrize("grpc_url, kept", [
    ("127.0.0.1:50051", "127.0.0.1:50051"), ("10.0.0.8:50051", None),
    ("127.0.0.1", None), (["127.0.0.1:1"], None), ("user@127.0.0.1:5", None),
])
def test_a_readiness_line_keeps_a_loopback_grpc_url_only(grpc_url: Any, kept: str | None) -> None:
    ready = parse_ready_line(ready_line(grpc_url=grpc_url), member="coder", formation_id=FID)
    assert ready.grpc_url == kept


def test_a_good_readiness_line_is_taken() -> None:
    ready = parse_ready_line(ready_line(), member="coder", formation_id=FID)
    assert ready.session_id == SESSION
    assert ready.door_url == "http://127.0.0.1:41234"
    assert ready.grpc_url is None, "a line without grpc_url: a door that serves none"
    assert ready.operator_token_path.name == "operator.token"


@pytest.mark.parametrize(("line", "fragment"), [
    (b"starting up", "not a readiness line"),
    (b"[1, 2]", "not a readiness line"),
    (json.dumps({"event": "started"}).encode(), "not a readiness line"),
    (ready_line(door_url=None), "reports no door"),
    (ready_line(door_url="http://10.0.0.8:80"), "reports no door"),
    (ready_line(door_url="http://127.0.0.1"), "reports no door"),
    (ready_line(formation=new_formation_id()), "reported formation frm_"),
    (ready_line(formation=None), "reported formation none"),
    (ready_line(member="planner"), "names another member"),
    (ready_line(session_id="ses_nope"), "no session id"),
    (ready_line(records_dir="/etc"), "no records directory"),
])
def test_every_bad_readiness_line_is_a_named_failure(line: bytes, fragment: str) -> None:
    with pytest.raises(NotReady) as caught:
        parse_ready_line(line, member="coder", formation_id=FID)
    assert fragment in caught.value.problem
    assert str(caught.value).startswith("member `coder` did not become ready: ")


def test_a_readiness_line_holding_a_token_is_never_echoed() -> None:
    key = FormationKey.generate()
    token = key.mint(formation=FID, caller="coder", callee="reviewer")
    with pytest.raises(NotReady) as caught:
        parse_ready_line(token.encode(), member="coder", formation_id=FID)
    assert "mft1." not in str(caught.value)


def test_the_card_must_name_the_reported_session() -> None:
    card = {"capabilities": {"extensions": [{"uri": "urn:murmur:session:v1",
                                             "params": {"sessionId": SESSION}}]}}
    assert card_names_session(card, SESSION)
    assert not card_names_session(card, new_session_id())
    assert not card_names_session({"capabilities": {"extensions": [
        {"uri": "urn:other", "params": {"sessionId": SESSION}}]}}, SESSION)
    assert not card_names_session([], SESSION)


def test_the_session_extension_is_the_one_the_door_serves() -> None:
    from gateway.door.card import CardInfo, build_card

    served = build_card(CardInfo(name="coder", description="", version="1",
                                 member="coder", session_id=SESSION), authenticated=True)
    assert card_names_session(served, SESSION)
    assert not card_names_session(served, "ses_" + "0" * 32)


def test_only_loopback_http_doors_with_a_port_count() -> None:
    assert loopback_door("http://127.0.0.1:8080")
    assert loopback_door("http://localhost:8080/")
    assert not loopback_door("https://127.0.0.1:8080")
    assert not loopback_door("http://user:pw@127.0.0.1:8080")
    assert not loopback_door("http://example.com:8080")
    assert not loopback_door(42)


def test_the_readiness_bound_is_180_seconds_unless_the_test_hook_shortens_it() -> None:
    assert ready_seconds({}) == 180
    assert ready_seconds({"MURMUR_TEST_READY_SECONDS": "2.5"}) == 2.5
    assert ready_seconds({"MURMUR_TEST_READY_SECONDS": "9999"}) == 180
    assert ready_seconds({"MURMUR_TEST_READY_SECONDS": "soon"}) == 180


# --------------------------------------------------------------------------- a member's process


def admitted_member(tmp_path: Path) -> Any:
    project = make_project(tmp_path, reachability={"planner": ["coder"]})
    return admit(project)


def test_a_members_argv_and_environment_hold_no_token(tmp_path: Path) -> None:
    roster = admitted_member(tmp_path)
    coder = roster.member("coder")
    argv = formation_members.member_argv(coder, project_dir=roster.project_dir,
                                         deadline="2026-10-23T22:00:00.000000Z",
                                         environ={})
    assert argv[:3] == [sys.executable, "-m", "launcher.cli"]
    assert argv[3:] == ["run", "--capsule", "local/coder", "--capsule-version", "1.0.0",
                        "--capsule-sha256", coder.sha256, "--project",
                        str(roster.project_dir), "--json", "--deadline",
                        "2026-10-23T22:00:00.000000Z"]
    env = formation_members.member_env(
        {"PATH": "/bin", "MURMUR_HOME": "relative/home", "MURMUR_FORMATION_PEERS": "x",
         "MURMUR_TEST_MEMBER_ARGV_PREFIX": "fake", "MURMUR_TEST_READY_SECONDS": "1"},
        formation_id=FID, channel_fd=7, lifeline_fd=8)
    assert env["MURMUR_FORMATION_ID"] == FID
    assert env["MURMUR_FORMATION_CHANNEL"] == "7"
    assert env["MURMUR_FORMATION_LIFELINE"] == "8"
    assert env["MURMUR_HOST_WARNINGS_REPORTED"] == "1"
    assert os.path.isabs(env["MURMUR_HOME"])
    assert "MURMUR_FORMATION_PEERS" not in env
    assert not any(name.startswith("MURMUR_TEST") for name in env)
    assert not any("mft1." in value for value in [*argv, *env.values()])


def test_the_test_hook_replaces_the_mur_command(tmp_path: Path) -> None:
    assert formation_members.mur_command(
        {"MURMUR_TEST_MEMBER_ARGV_PREFIX": "/usr/bin/python3 '/tmp/fake member.py'"}) == [
        "/usr/bin/python3", "/tmp/fake member.py"]


# --------------------------------------------------------------------------- projects


def make_project(tmp_path: Path, *, reachability: dict[str, list[str]] | None = None,
                 allow_localhost: bool = True) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    callees = reachability or {}
    called = {name for targets in callees.values() for name in targets}
    for name in ("planner", "coder"):
        source = tmp_path / "src" / name
        source.mkdir(parents=True)
        manifest = [f"manifest_version: 1\nname: {name}\nversion: 1.0.0\n",
                    "agent: {python: agent:run}\n"]
        if name in called:
            manifest.append("exports: {peer_tasks: {accept: true}}\n")
        if callees:
            manifest.append("network: {authentication: {}}\n")
        if name in callees and allow_localhost:
            manifest.append("capabilities: {network: {allow: [localhost]}}\n")
        (source / "murmur.yaml").write_text("".join(manifest))
        (source / "agent.py").write_text("async def run(task):\n    return task.text\n")
        packed = pack(source, tmp_path / f"{name}.mur.zip")
        install(packed.path, project)
    roster = textwrap.dedent("""\
        roster_version: 1
        members:
          - {name: planner, capsule: local/planner, version: 1.0.0, entry: true}
          - {name: coder, capsule: local/coder, version: 1.0.0}
        """)
    if callees:
        roster += "reachability:\n" + "".join(
            f"  - {{from: {caller}, to: [{', '.join(targets)}]}}\n"
            for caller, targets in callees.items())
    (project / "roster.yaml").write_text(roster)
    return project


def test_w_run_008_names_a_caller_whose_grant_reaches_no_door(tmp_path: Path) -> None:
    project = make_project(tmp_path, reachability={"planner": ["coder"]},
                           allow_localhost=False)
    warnings = reach_warnings(admit(project))
    assert [warning.code for warning in warnings] == ["W-RUN-008"]
    assert "`planner` may call `coder`" in warnings[0].message


def test_doctor_gives_w_run_008_before_any_launch(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from launcher.cli import main

    project = make_project(tmp_path, reachability={"planner": ["coder"]},
                           allow_localhost=False)
    assert main(["doctor", "--project", str(project)]) == 0
    assert "warning W-RUN-008" in capsys.readouterr().err
    assert main(["doctor", "--project", str(project), "--json"]) == 0
    assert [w["code"] for w in json.loads(capsys.readouterr().out)["warnings"]] == [
        "W-RUN-008"]


def test_no_w_run_008_when_the_caller_may_reach_localhost(tmp_path: Path) -> None:
    project = make_project(tmp_path, reachability={"planner": ["coder"]})
    assert reach_warnings(admit(project)) == []


def run_args(project: Path, **changes: Any) -> argparse.Namespace:
    values: dict[str, Any] = {
        "roster": True, "capsule": None, "capsule_version": None, "capsule_sha256": None,
        "project": str(project), "task": None, "deadline": None,
        "lifecycle_task_acceptance": None, "lifecycle_after_task": None, "resume": None,
        "json": True}
    values.update(changes)
    return argparse.Namespace(**values)


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    started: list[str] = []

    def refuse(member: Any, **_: Any) -> Any:
        started.append(member.name)
        raise AssertionError("no member may start")

    monkeypatch.setattr(formation, "start_member", refuse)
    return started


def test_roster_refuses_resume_with_exit_2(tmp_path: Path, nothing_starts: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert formation.main(run_args(tmp_path, resume=new_session_id())) == 2
    assert "--resume" in capsys.readouterr().err
    assert nothing_starts == []


def test_roster_refuses_member_flags_with_exit_2(tmp_path: Path,
                                                 nothing_starts: list[str]) -> None:
    assert formation.main(run_args(tmp_path, capsule_version="1.0.0")) == 2
    assert formation.main(run_args(tmp_path, lifecycle_after_task="exit")) == 2


def test_a_formation_member_cannot_launch_a_formation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nothing_starts: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MURMUR_FORMATION_ID", FID)
    assert formation.main(run_args(make_project(tmp_path))) == 1
    assert "error E-RUN-046:" in capsys.readouterr().err
    assert nothing_starts == []


def test_peers_variable_in_the_launchers_environment_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nothing_starts: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MURMUR_FORMATION_PEERS", "coder=http://coder.formation.invalid")
    assert formation.main(run_args(make_project(tmp_path))) == 1
    assert "error E-RUN-046:" in capsys.readouterr().err


def test_a_refused_roster_starts_nothing(tmp_path: Path, nothing_starts: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "roster.yaml").write_text("roster_version: 2\nmembers: []\n")
    assert formation.main(run_args(project)) == 1
    err = capsys.readouterr().err
    assert "error E-ROS-001:" in err
    assert "  hint: " in err
    assert nothing_starts == []
    assert not paths.formations_root().exists()


def test_an_existing_peer_directory_is_e_run_045_and_nothing_launches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nothing_starts: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    project = make_project(tmp_path)
    made: list[Path] = []

    def make_and_plant(formation_id: str) -> Path:
        path = formations.make_formation_dir(formation_id)
        (path / "coder").mkdir()  # someone got there first
        made.append(path / "coder")
        return path

    monkeypatch.setattr(formation, "make_formation_dir", make_and_plant)
    assert formation.main(run_args(project)) == 1
    err = capsys.readouterr().err
    assert "error E-RUN-045: member `coder` did not become ready" in err
    assert str(made[0]) in err
    assert nothing_starts == []
    assert running_records.list_running() == []  # the launcher's record is gone too


def test_a_bad_deadline_is_a_usage_error(tmp_path: Path, nothing_starts: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert formation.main(run_args(make_project(tmp_path), deadline="soonish")) == 2
    assert "--deadline" in capsys.readouterr().err


# --------------------------------------------------------------------------- the formation line


def test_the_human_formation_table_has_one_row_a_member() -> None:
    line = {"event": "formation", "formation_id": FID, "project_dir": "/p", "members": [
        {"name": "planner", "entry": True, "pid": 10, "session_id": SESSION,
         "door_url": "http://127.0.0.1:1", "workdir": "/p"},
        {"name": "coder", "entry": False, "pid": 11, "session_id": None, "door_url": None,
         "workdir": "/h/formations/x/coder"}]}
    table = render_table(line).splitlines()
    assert table[0] == f"formation {FID} (2 members) in /p"
    assert table[1].split() == ["MEMBER", "ENTRY", "PID", "SESSION", "DOOR", "WORKDIR"]
    assert table[2].split() == ["planner", "yes", "10", SESSION, "http://127.0.0.1:1", "/p"]
    assert table[3].split() == ["coder", "11", "-", "-", "/h/formations/x/coder"]


def test_formation_line_lists_members_in_roster_order() -> None:
    class Spec:
        def __init__(self, name: str, index: int, entry: bool) -> None:
            self.name, self.index, self.entry = name, index, entry

    class Proc:
        pid = 5

    members = [formation_members.LaunchedMember(
        spec=Spec(name, index, index == 0), workdir=Path("/w") / name,  # type: ignore[arg-type]
        process=Proc(), lifeline=None, channel=None,  # type: ignore[arg-type]
        started_at=0.0) for index, name in ((1, "coder"), (0, "planner"))]
    line = formation_line(FID, Path("/p"), members)
    assert [m["name"] for m in line["members"]] == ["planner", "coder"]
    assert set(line) == {"event", "formation_id", "project_dir", "members"}
    assert set(line["members"][0]) == {"name", "entry", "pid", "session_id", "door_url",
                                       "grpc_url", "workdir"}
