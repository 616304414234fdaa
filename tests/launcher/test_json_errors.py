"""``--json`` holds on failure too: every command that takes it prints one JSON object on
stdout and nothing on stderr, in the one shape (``ok``, ``command``, ``exit_status``,
``error`` shaped as a diagnostic), and exits with the status it would without
``--json``: the operator's commands, ``mur doctor``, ``mur explain``, a usage error
argparse finds, an ambiguous id prefix, and a launch refused before its formation
line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli import main

NOT_RUNNING = "frm_0190c0de00007000800000000000f00d"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object], str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert len(lines) == 1, captured.out
    return status, json.loads(lines[0]), captured.err


def assert_failure_shape(document: dict[str, object], status: int) -> None:
    assert document["ok"] is False and document["exit_status"] == status
    error = document["error"]
    assert isinstance(error, dict)
    assert set(error) == {"code", "severity", "message", "hint", "path"}
    assert error["severity"] == "error" and error["message"]


@pytest.mark.parametrize(("argv", "status"), [
    (("stop", NOT_RUNNING), 1),
    (("stop", "not-an-id"), 2),
    (("send", NOT_RUNNING, "hello"), 1),
    (("trace", "show", "not-an-id"), 2),
    (("logs", NOT_RUNNING), 1),
    (("logs", NOT_RUNNING, "--since", "yesterday"), 2),
    (("audit", "not-an-id"), 2),
    (("cancel", NOT_RUNNING, "task-1"), 1),
    (("approvals", NOT_RUNNING), 1),
])
def test_operator_failures_are_one_json_object(capsys: pytest.CaptureFixture[str],
                                               murmur_home: Path, argv: tuple[str, ...],
                                               status: int) -> None:
    got, document, err = run(capsys, *argv, "--json")
    assert (got, err) == (status, "")
    assert_failure_shape(document, status)
    assert document["command"] == "mur " + " ".join(argv[:2] if argv[0] == "trace" else argv[:1])


@pytest.mark.parametrize(("argv", "command"), [
    (("trace", "show"), "mur trace show"),          # its ID missing
    (("logs", NOT_RUNNING, "--tail", "many"), "mur logs"),
    (("explain", "E-NOPE-001"), "mur explain"),
])
def test_usage_errors_with_json_are_the_same_object(
        capsys: pytest.CaptureFixture[str], murmur_home: Path, argv: tuple[str, ...],
        command: str) -> None:
    try:
        got = main([*argv, "--json"])
    except SystemExit as exit_:     # argparse's own usage errors end the program
        got = int(str(exit_.code))
    captured = capsys.readouterr()
    assert (got, captured.err) == (2, "")
    document = json.loads(captured.out)
    assert_failure_shape(document, 2)
    assert document["command"] == command


def test_a_launch_refused_with_json_prints_the_failure_object(
        capsys: pytest.CaptureFixture[str], murmur_home: Path, tmp_path: Path) -> None:
    (tmp_path / "roster.yaml").write_text("version: 1\nmembers: []\n")
    status = main(["run", "--roster", "--project", str(tmp_path), "--json", "--task", "hi"])
    captured = capsys.readouterr()
    assert status == 1
    document = json.loads(captured.out)
    assert_failure_shape(document, 1)
    error = document["error"]
    assert isinstance(error, dict) and str(error["code"]).startswith("E-ROS-")
    assert document["command"] == "mur run"
    assert str(error["code"]) in captured.err      # the person at the terminal reads it too


def test_the_same_failures_without_json_are_one_line_on_stderr(
        capsys: pytest.CaptureFixture[str], murmur_home: Path) -> None:
    assert main(["stop", NOT_RUNNING]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("mur stop: formation ")


def test_doctor_json_with_a_missing_project_is_its_refusal_object(
        capsys: pytest.CaptureFixture[str], murmur_home: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    status, document, err = run(capsys, "doctor", "--project", str(missing), "--json")
    assert (status, err) == (2, "")
    assert_failure_shape(document, 2)
    assert document["admitted"] is False and document["warnings"] == []
    error = document["error"]
    assert isinstance(error, dict) and error["path"] == "--project"
    assert str(missing) in str(error["message"])
