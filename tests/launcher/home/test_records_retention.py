"""The retention pass over formation directories ("Removing formation directories")."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from launcher.home import formations, records, retention, running_records
from launcher.home.retention import retention_pass
from launcher.home.running_records import RunningRecord
from launcher.ids import id_time, is_formation_id, new_session_id
from launcher.spawn.process import process_start_time

NOW = datetime.now(UTC)


def formation_id_at(moment: datetime) -> str:
    ms = int(moment.timestamp() * 1000)
    rand = secrets.token_hex(9)
    ident = f"frm_{ms:012x}7{rand[:3]}a{rand[3:18]}"
    assert is_formation_id(ident)
    return ident


@pytest.fixture(scope="module")
def dead_launcher() -> tuple[int, str]:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start_time(child.pid) or "1"
    child.wait()
    return child.pid, start


@pytest.fixture
def live_launcher() -> Iterator[tuple[int, str]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    start = process_start_time(child.pid)
    assert start is not None
    yield child.pid, start
    child.kill()
    child.wait()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def make_formation(hours_ago: float, project: Path | None, launcher: tuple[int, str],
                   *, members: tuple[str, ...] = ("coder",)) -> str:
    """A formation dir (with marker unless project is None) and its peers' records."""
    formation = formation_id_at(NOW - timedelta(hours=hours_ago))
    folder = formations.make_formation_dir(formation)
    if project is not None:
        formations.write_formation_marker(formation, project_dir=project,
                                       launcher_pid=launcher[0], launcher_start=launcher[1])
    for member in members:
        peer = formations.make_peer_dir(formation, member)
        staged = records.stage_session(peer, new_session_id())
        staged.trace.write_text('{"event":"session_start"}\n')
        assert folder in peer.parents
    return formation


def exists(formation: str) -> bool:
    return (formations.formation_dir(formation).exists()
            or formations.formation_records(formation).exists())


def run_pass(project: Path, current: str, *, max_sessions: int | None = None,
             max_age: timedelta | None = None) -> list[retention.Removal]:
    return retention_pass(project_dir=project, current_formation_id=current,
                          max_sessions=max_sessions, max_age=max_age, now=NOW)


def test_max_sessions_two_with_three_dirs_removes_the_oldest_with_its_records(
        project: Path, dead_launcher: tuple[int, str]) -> None:
    oldest = make_formation(3, project, dead_launcher, members=("coder", "reviewer"))
    middle = make_formation(2, project, dead_launcher)
    current = make_formation(0, project, (os.getpid(), process_start_time(os.getpid()) or ""))
    assert formations.formation_records(oldest).is_dir()
    removals = run_pass(project, current, max_sessions=2)
    assert [(r.formation_id, r.reason) for r in removals] == [(oldest, "max_sessions")]
    assert not exists(oldest)
    assert exists(middle) and exists(current)
    assert retention.format_removal(removals[0]) == (
        f"[mur run] retention: removed formation {oldest} (max_sessions)")


def test_removals_come_newest_first(project: Path, dead_launcher: tuple[int, str]) -> None:
    old = [make_formation(h, project, dead_launcher) for h in (5, 4, 3)]
    current = make_formation(0, project, dead_launcher)
    removals = run_pass(project, current, max_sessions=1)
    assert [r.formation_id for r in removals] == [old[2], old[1], old[0]]
    assert all(r.reason == "max_sessions" for r in removals)


def test_max_age_reads_the_time_in_the_id_and_wins_for_a_dir_over_both(
        project: Path, dead_launcher: tuple[int, str]) -> None:
    ancient = make_formation(48, project, dead_launcher)
    old = make_formation(30, project, dead_launcher)
    recent = make_formation(1, project, dead_launcher)
    current = make_formation(0, project, dead_launcher)
    assert NOW - id_time(ancient) > timedelta(hours=47)
    removals = run_pass(project, current, max_sessions=3, max_age=timedelta(days=1))
    assert [(r.formation_id, r.reason) for r in removals] == [
        (old, "max_age"), (ancient, "max_age")]
    assert exists(recent)
    only_age = run_pass(project, current, max_age=timedelta(minutes=30))
    assert [(r.formation_id, r.reason) for r in only_age] == [(recent, "max_age")]


def test_without_trace_retain_nothing_is_removed(project: Path,
                                                 dead_launcher: tuple[int, str]) -> None:
    old = make_formation(100, project, dead_launcher)
    current = make_formation(0, project, dead_launcher)
    assert run_pass(project, current) == []
    assert exists(old)


def test_no_marker_and_another_projects_marker_are_kept_and_not_counted(
        project: Path, tmp_path: Path, dead_launcher: tuple[int, str]) -> None:
    other_project = tmp_path / "other"
    other_project.mkdir()
    unmarked = make_formation(5, None, dead_launcher)
    broken = make_formation(4, None, dead_launcher)
    (formations.formation_dir(broken) / "formation.json").write_text("{oops")
    foreign = make_formation(3, other_project, dead_launcher)
    mine = make_formation(2, project, dead_launcher)
    current = make_formation(0, project, dead_launcher)
    assert run_pass(project, current, max_sessions=2) == []
    removals = run_pass(project, current, max_sessions=1, max_age=timedelta(minutes=1))
    assert [r.formation_id for r in removals] == [mine]
    for kept in (unmarked, broken, foreign, current):
        assert exists(kept)


def test_a_running_launcher_keeps_its_formation(project: Path,
                                                 live_launcher: tuple[int, str],
                                                 dead_launcher: tuple[int, str]) -> None:
    running = make_formation(3, project, live_launcher)
    ended = make_formation(2, project, dead_launcher)
    current = make_formation(0, project, dead_launcher)
    removals = run_pass(project, current, max_sessions=1)
    assert [r.formation_id for r in removals] == [ended]
    assert exists(running)


def test_a_launcher_start_that_differs_means_a_reused_pid_not_a_running_launcher(
        project: Path, live_launcher: tuple[int, str]) -> None:
    pid, start = live_launcher
    reused = make_formation(3, project, (pid, str(int(start) + 1)))
    unknown_start = make_formation(2, project, (pid, ""))
    current = make_formation(0, project, (pid, start))
    removals = run_pass(project, current, max_sessions=1)
    assert [r.formation_id for r in removals] == [reused]
    assert exists(unknown_start)  # start unreadable: an existing pid counts as running


def test_a_running_member_keeps_its_formation(project: Path,
                                              live_launcher: tuple[int, str],
                                              dead_launcher: tuple[int, str]) -> None:
    member_running = make_formation(3, project, dead_launcher)
    member_stale = make_formation(2, project, dead_launcher)
    current = make_formation(0, project, dead_launcher)
    pid, start = live_launcher
    running_records.write_running(RunningRecord(
        id=new_session_id(), pid=pid, start=start, kind="session",
        formation_id=member_running, member="coder"))
    running_records.write_running(RunningRecord(
        id=new_session_id(), pid=dead_launcher[0], start=dead_launcher[1], kind="session",
        formation_id=member_stale, member="coder"))
    removals = run_pass(project, current, max_sessions=1)
    assert [r.formation_id for r in removals] == [member_stale]
    assert exists(member_running)


def test_when_running_records_cannot_be_read_every_formation_counts_as_running(
        project: Path, murmur_home: Path, dead_launcher: tuple[int, str]) -> None:
    old = make_formation(3, project, dead_launcher)
    current = make_formation(0, project, dead_launcher)
    (murmur_home / "running").write_text("not a folder")
    assert run_pass(project, current, max_sessions=1, max_age=timedelta(0)) == []
    assert exists(old)


def test_the_current_formation_and_newer_ones_are_never_removed(
        project: Path, dead_launcher: tuple[int, str]) -> None:
    old = make_formation(3, project, dead_launcher)
    current = make_formation(2, project, dead_launcher)
    newer = make_formation(1, project, dead_launcher)
    removals = run_pass(project, current, max_sessions=1, max_age=timedelta(0))
    assert [r.formation_id for r in removals] == [old]
    assert exists(current) and exists(newer)


def test_the_current_formation_counts_even_without_a_marker(
        project: Path, dead_launcher: tuple[int, str]) -> None:
    old = make_formation(3, project, dead_launcher)
    current = make_formation(0, None, dead_launcher)
    removals = run_pass(project, current, max_sessions=1)
    assert [r.formation_id for r in removals] == [old]


def test_a_marker_naming_the_project_through_a_symlink_is_the_project(
        project: Path, tmp_path: Path, dead_launcher: tuple[int, str]) -> None:
    link = tmp_path / "link"
    link.symlink_to(project)
    old = make_formation(3, link, dead_launcher)
    current = make_formation(0, project, dead_launcher)
    assert [r.formation_id for r in run_pass(link, current, max_sessions=1)] == [old]


def test_symlinks_and_strays_in_formations_are_left_alone(
        project: Path, tmp_path: Path, murmur_home: Path,
        dead_launcher: tuple[int, str]) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "formation.json").write_text(
        f'{{"project_dir": "{project}", "launcher_pid": 1, "launcher_start": "x"}}')
    current = make_formation(0, project, dead_launcher)
    fake = formation_id_at(NOW - timedelta(hours=5))
    (murmur_home / "formations" / fake).symlink_to(victim)
    (murmur_home / "formations" / "not-a-formation").mkdir()
    assert run_pass(project, current, max_sessions=1, max_age=timedelta(0)) == []
    assert victim.is_dir() and (victim / "formation.json").exists()
    assert (murmur_home / "formations" / "not-a-formation").is_dir()


def test_no_formations_folder_is_nothing_to_do(project: Path) -> None:
    current = formation_id_at(NOW)
    assert run_pass(project, current, max_sessions=0, max_age=timedelta(0)) == []


def test_a_removed_formation_takes_its_detached_launchers_log_with_it(
        project: Path, dead_launcher: tuple[int, str]) -> None:
    from launcher.home.paths import detached_logs

    old = make_formation(3, project, dead_launcher)
    kept = make_formation(2, project, dead_launcher)
    current = make_formation(0, project, (os.getpid(), process_start_time(os.getpid()) or ""))
    detached_logs().mkdir(parents=True)
    for formation in (old, kept):
        (detached_logs() / f"{formation}.log").write_text("launcher lines\n")
    run_pass(project, current, max_sessions=2)
    assert sorted(path.name for path in detached_logs().iterdir()) == [f"{kept}.log"]
