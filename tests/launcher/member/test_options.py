"""``mur run --capsule``'s flags: deadlines, --task files, and the usage errors."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from launcher.member.options import options_from, parse_deadline
from launcher.spawn.run_flags import MAX_TASK_BYTES, UsageError, read_task

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def args(**changes: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "capsule": "local/echo", "capsule_version": "1.0.0", "capsule_sha256": None,
        "project": ".", "task": None, "deadline": None, "lifecycle_task_acceptance": None,
        "lifecycle_after_task": None, "resume": None, "json": False}
    values.update(changes)
    return argparse.Namespace(**values)


@pytest.mark.parametrize(("value", "seconds"), [
    ("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), ("45", 45)])
def test_a_duration_counts_from_the_start(value: str, seconds: int) -> None:
    assert parse_deadline(value, now=NOW) == NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize("value", [
    "2026-01-02T03:05:00Z", "2026-01-02T03:05:00z", "2026-01-02T03:05:00+00:00",
    "2026-01-02T04:05:00+01:00", "2026-01-02T03:05:00.000000Z", "2026-01-02T03:05:00"])
def test_an_iso_time_is_that_moment_in_utc_its_zone_defaulting_to_utc(value: str) -> None:
    moment = parse_deadline(value, now=NOW)
    assert moment == datetime(2026, 1, 2, 3, 5, tzinfo=UTC)
    assert moment.tzinfo == UTC


@pytest.mark.parametrize(("value", "words"), [
    ("2026-01-02T03:05:00+25:00", "neither"), ("soon", "neither"), ("0s", "longer than zero"),
    ("10x", "not a duration"), ("", "neither")])
def test_a_deadline_that_names_no_moment_is_a_usage_error(value: str, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        parse_deadline(value, now=NOW)


def test_task_text_is_taken_as_it_is_unless_it_names_a_file(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.chdir(tmp_path)
    assert read_task("write a poem") == "write a poem"
    (tmp_path / "task.md").write_text("from the file\n")
    assert read_task("task.md") == "from the file\n"
    (tmp_path / "folder").mkdir()
    assert read_task("folder") == "folder"  # a folder is not a file: the text itself


@pytest.mark.parametrize(("content", "words"), [
    (b"\xff\xfe\x00bad", "not UTF-8"), (b"  \n", "empty")])
def test_a_task_file_that_is_not_a_task_is_a_usage_error(tmp_path: Path, content: bytes,
                                                         words: str) -> None:
    path = tmp_path / "task.md"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=words):
        read_task(str(path))


def test_an_oversized_task_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.md"
    with path.open("wb") as handle:
        handle.truncate(MAX_TASK_BYTES + 1)
    with pytest.raises(UsageError, match="larger than"):
        read_task(str(path))


def test_an_empty_task_is_refused() -> None:
    with pytest.raises(UsageError, match="empty"):
        read_task("   ")


def test_options_carry_every_flag(tmp_path: Path) -> None:
    options = options_from(args(
        project=str(tmp_path), task="hello", deadline="90s", capsule_sha256="AB" * 32,
        lifecycle_task_acceptance="single", lifecycle_after_task="exit",
        resume="ses_0190a1b2c3d47e5f8a9b0c1d2e3f4a5b", json=True), now=NOW)
    assert options.capsule == "local/echo" and options.version == "1.0.0"
    assert options.sha256 == "ab" * 32
    assert options.project == tmp_path and options.task == "hello"
    assert options.deadline == NOW + timedelta(seconds=90)
    assert options.task_acceptance == "single" and options.after_task == "exit"
    assert options.resume == "ses_0190a1b2c3d47e5f8a9b0c1d2e3f4a5b" and options.json


@pytest.mark.parametrize(("changes", "flag"), [
    ({"capsule_version": None}, "--capsule-version"),
    ({"capsule_sha256": "abc"}, "--capsule-sha256"),
    ({"resume": "yesterday"}, "--resume"),
    ({"project": "/no/such/project"}, "--project"),
])
def test_each_bad_flag_is_named(changes: dict[str, object], flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        options_from(args(**changes))
