"""launcher.home.records: records directories, operator.token, running records, formation dirs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.home import formations, records, retention, running_records
from launcher.home.formations import PeerDirectoryExists
from launcher.home.running_records import RunningRecord, RunningRecordsUnreadable
from launcher.ids import new_formation_id, new_session_id
from launcher.spawn.process import process_start_time


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --------------------------------------------------------------------------- sessions


def test_records_directory_is_under_the_workdir_path_without_its_slash(
        murmur_home: Path, tmp_path: Path) -> None:
    session = new_session_id()
    staged = records.stage_session(tmp_path, session)
    real = os.path.realpath(tmp_path)
    assert staged.dir == murmur_home / "records" / real.lstrip("/") / session
    assert staged.workdir == Path(real)
    for sub in ("out", "home", "tmp", "logs"):
        assert (staged.dir / sub).is_dir()
        assert mode(staged.dir / sub) == 0o700
    assert mode(staged.dir) == 0o700
    assert staged.trace == staged.dir / "trace.jsonl"
    assert staged.result == staged.dir / "out" / "result.txt"
    assert staged.bootstrap_log == staged.dir / "logs" / "bootstrap.log"
    assert staged.operator_token == staged.dir / "operator.token"


def test_a_symlinked_workdir_records_under_its_real_path(murmur_home: Path,
                                                         tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    session = new_session_id()
    assert records.session_records(link, session).dir == records.session_records(
        real, session).dir


def test_staging_a_new_session_twice_is_refused_unless_resuming(tmp_path: Path) -> None:
    session = new_session_id()
    first = records.stage_session(tmp_path, session)
    with pytest.raises(FileExistsError):
        records.stage_session(tmp_path, session)
    assert records.stage_session(tmp_path, session, resume=True) == first


def test_session_records_refuses_a_path_traversal_session_id(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        records.session_records(tmp_path, "../../etc")


def test_operator_token_is_written_once_at_mode_0600(tmp_path: Path) -> None:
    staged = records.stage_session(tmp_path, new_session_id())
    old = os.umask(0)
    try:
        records.write_operator_token(staged.operator_token, "op-secret-1")
    finally:
        os.umask(old)
    assert mode(staged.operator_token) == 0o600
    assert records.read_operator_token(staged.operator_token) == "op-secret-1"
    with pytest.raises(FileExistsError):
        records.write_operator_token(staged.operator_token, "op-secret-2")
    records.write_operator_token(staged.operator_token, "op-secret-3", replace=True)
    assert records.read_operator_token(staged.operator_token) == "op-secret-3"


def test_operator_token_is_never_written_through_a_planted_symlink(tmp_path: Path) -> None:
    staged = records.stage_session(tmp_path, new_session_id())
    target = tmp_path / "attacker-reads-this"
    staged.operator_token.symlink_to(target)
    with pytest.raises(FileExistsError):
        records.write_operator_token(staged.operator_token, "op-secret")
    assert not target.exists()
    with pytest.raises(OSError):
        records.read_operator_token(staged.operator_token)


# --------------------------------------------------------------------------- running records


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    yield child
    child.kill()
    child.wait()


def session_record(pid: int, start: str | None, **extra: str) -> RunningRecord:
    return RunningRecord(id=new_session_id(), pid=pid, start=start, kind="session",
                         started=running_records.now_iso(), **extra)  # type: ignore[arg-type]


def test_running_record_round_trips_and_is_0600(murmur_home: Path) -> None:
    record = session_record(os.getpid(), process_start_time(os.getpid()),
                            door_url="http://127.0.0.1:1234", capsule="local/coder",
                            version="1.2.0", records_dir="/x", project_dir="/p",
                            formation_id=new_formation_id(), member="coder")
    path = running_records.write_running(record)
    assert path == murmur_home / "running" / f"{record.id}.json"
    assert mode(path) == 0o600
    assert json.loads(path.read_text())["pid"] == os.getpid()
    assert running_records.read_running(record.id) == record
    assert running_records.list_running() == [record]
    assert running_records.list_live() == [record]
    assert running_records.is_running(record.id)
    running_records.remove_running(record.id)
    running_records.remove_running(record.id)  # already gone: nothing
    assert not path.exists()
    assert not running_records.is_running(record.id)
    assert running_records.read_running(record.id) is None


def test_a_launcher_record_is_named_by_its_formation_id(murmur_home: Path) -> None:
    formation = new_formation_id()
    record = RunningRecord(id=formation, pid=os.getpid(), start=None, kind="launcher",
                           formation_id=formation, project_dir="/p")
    running_records.write_running(record)
    assert running_records.is_running(formation)
    with pytest.raises(ValueError):
        RunningRecord.from_json({**record.to_json(), "id": new_session_id()})


def test_stale_records_are_ignored_and_pruned(murmur_home: Path,
                                              sleeper: subprocess.Popen[bytes]) -> None:
    live = session_record(sleeper.pid, process_start_time(sleeper.pid))
    ended_child = subprocess.Popen([sys.executable, "-c", "pass"])
    ended_start = process_start_time(ended_child.pid)
    ended_child.wait()
    gone = session_record(ended_child.pid, ended_start)
    reused = session_record(sleeper.pid, str(int(process_start_time(sleeper.pid) or 0) - 1))
    for record in (live, gone, reused):
        running_records.write_running(record)
    corrupt = murmur_home / "running" / f"{new_session_id()}.json"
    corrupt.write_text("{not json")
    stray = murmur_home / "running" / "notes.txt"
    stray.write_text("left alone")

    assert {r.id for r in running_records.list_running()} == {live.id, gone.id, reused.id}
    assert [r.id for r in running_records.list_live()] == [live.id]
    assert not running_records.is_running(gone.id)
    assert not running_records.is_running(reused.id)  # same pid, other start time: reused

    pruned = running_records.prune_stale()
    assert set(pruned) == {gone.id, reused.id, corrupt.stem}
    remaining = sorted(p.name for p in (murmur_home / "running").iterdir())
    assert remaining == sorted([f"{live.id}.json", "notes.txt"])


def test_a_record_that_names_another_id_than_its_file_is_ignored(murmur_home: Path) -> None:
    record = session_record(os.getpid(), None)
    path = running_records.write_running(record)
    other = path.with_name(f"{new_session_id()}.json")
    path.rename(other)
    assert running_records.list_running() == []


def test_no_running_folder_means_nothing_runs(murmur_home: Path) -> None:
    assert running_records.list_live() == []
    assert running_records.prune_stale() == []


def test_an_unreadable_running_folder_is_reported_not_hidden(murmur_home: Path) -> None:
    folder = murmur_home / "running"
    folder.mkdir()
    folder.chmod(0)
    try:
        if os.access(folder, os.R_OK):
            pytest.skip("running as a user that ignores permissions")
        with pytest.raises(RunningRecordsUnreadable):
            running_records.list_live()
    finally:
        folder.chmod(0o700)


def test_a_running_path_that_is_not_a_folder_is_unreadable(murmur_home: Path) -> None:
    (murmur_home / "running").write_text("not a folder")
    with pytest.raises(RunningRecordsUnreadable):
        running_records.list_live()
    with pytest.raises(RunningRecordsUnreadable):
        running_records.prune_stale()


def test_running_record_names_must_be_ids(murmur_home: Path) -> None:
    with pytest.raises(ValueError):
        running_records.remove_running("../../x")


@pytest.mark.parametrize("change", [
    {"pid": "12"}, {"pid": True}, {"pid": 0}, {"kind": "other"}, {"start": 5},
    {"door_url": ["x"]}, {"started": 3},
])
def test_malformed_running_records_do_not_parse(change: dict[str, object]) -> None:
    data = session_record(os.getpid(), "1").to_json() | change
    with pytest.raises(ValueError):
        RunningRecord.from_json(data)


# --------------------------------------------------------------------------- formations


def test_formation_dir_and_marker_are_owner_only(murmur_home: Path, tmp_path: Path) -> None:
    formation = new_formation_id()
    old = os.umask(0o022)
    try:
        path = formations.make_formation_dir(formation)
    finally:
        os.umask(old)
    assert path == murmur_home / "formations" / formation
    assert mode(murmur_home / "formations") == 0o700
    assert mode(path) == 0o700
    project = tmp_path / "proj"
    project.mkdir()
    link = tmp_path / "proj-link"
    link.symlink_to(project)
    marker = formations.write_formation_marker(formation, project_dir=link,
                                            launcher_pid=os.getpid(), launcher_start=None,
                                            edges=[("a", "b")])
    assert mode(marker) == 0o600
    data = json.loads(marker.read_text())
    assert data == {"project_dir": os.path.realpath(project), "launcher_pid": os.getpid(),
                    "launcher_start": "", "edges": [{"from": "a", "to": "b"}]}
    parsed = formations.read_formation_marker(formation)
    assert parsed is not None and parsed.project_dir == os.path.realpath(project)
    with pytest.raises(FileExistsError):  # a marker is never replaced
        formations.write_formation_marker(formation, project_dir=project, launcher_pid=1,
                                       launcher_start="5")


def test_an_existing_formations_folder_is_made_owner_only(murmur_home: Path) -> None:
    (murmur_home / "formations").mkdir(mode=0o755)
    (murmur_home / "formations").chmod(0o755)
    formations.make_formation_dir(new_formation_id())
    assert mode(murmur_home / "formations") == 0o700


def test_a_formation_dir_is_never_made_twice(murmur_home: Path) -> None:
    formation = new_formation_id()
    formations.make_formation_dir(formation)
    with pytest.raises(FileExistsError):
        formations.make_formation_dir(formation)


def test_peer_dir_is_0700_and_never_reused(murmur_home: Path) -> None:
    formation = new_formation_id()
    formations.make_formation_dir(formation)
    old = os.umask(0)
    try:
        peer = formations.make_peer_dir(formation, "coder")
    finally:
        os.umask(old)
    assert peer == murmur_home / "formations" / formation / "coder"
    assert mode(peer) == 0o700
    with pytest.raises(PeerDirectoryExists) as caught:
        formations.make_peer_dir(formation, "coder")
    assert caught.value.path == peer
    assert str(peer) in str(caught.value)


def test_a_symlink_planted_at_a_peer_path_is_refused(murmur_home: Path,
                                                     tmp_path: Path) -> None:
    formation = new_formation_id()
    formations.make_formation_dir(formation)
    (murmur_home / "formations" / formation / "coder").symlink_to(tmp_path)
    with pytest.raises(PeerDirectoryExists):
        formations.make_peer_dir(formation, "coder")


def test_peer_names_are_member_names(murmur_home: Path) -> None:
    formation = new_formation_id()
    formations.make_formation_dir(formation)
    with pytest.raises(ValueError):
        formations.make_peer_dir(formation, "../escape")


def test_peer_records_live_under_the_formation_dir_path(murmur_home: Path) -> None:
    formation = new_formation_id()
    peer = formations.make_formation_dir(formation) / "coder"
    session = new_session_id()
    expected = (murmur_home / "records" / os.path.realpath(murmur_home).lstrip("/")
                / "formations" / formation / "coder" / session)
    assert records.session_records(peer, session).dir == expected
    assert formations.formation_records(formation) == expected.parent.parent


@pytest.mark.parametrize("content", [
    None, "", "not json", "[]", '{"project_dir": "/p", "launcher_pid": 1}',
    '{"project_dir": "rel", "launcher_pid": 1, "launcher_start": ""}',
    '{"project_dir": "/p", "launcher_pid": "1", "launcher_start": ""}',
    '{"project_dir": "/p", "launcher_pid": true, "launcher_start": ""}',
])
def test_missing_or_unparsable_markers_read_as_none(murmur_home: Path,
                                                    content: str | None) -> None:
    formation = new_formation_id()
    path = formations.make_formation_dir(formation)
    if content is not None:
        (path / "formation.json").write_text(content)
    assert formations.read_formation_marker(formation) is None


def test_warning_and_removal_lines_read_as_the_reference_shows() -> None:
    removal = retention.Removal(formation_id="frm_0199c4e2f1b7712a9d3e4f5061728394",
                              reason="max_sessions", path=Path("/x"))
    assert retention.format_removal(removal) == (
        "[mur run] retention: removed formation frm_0199c4e2f1b7712a9d3e4f5061728394 "
        "(max_sessions)")
    assert formations.format_no_marker_warning("permission denied") == (
        "[mur run] warning: formation has no ownership marker (permission denied); "
        "its directory will never be removed automatically")
