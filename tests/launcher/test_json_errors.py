"""``--json`` holds on failure too: ``mur stop``, ``mur send``, ``mur trace show`` and
``mur doctor --project /missing`` print one JSON object on stdout and nothing on stderr,
and exit with the status they would without ``--json``."""

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


@pytest.mark.parametrize(("argv", "status"), [
    (("stop", NOT_RUNNING), 1),
    (("stop", "not-an-id"), 2),
    (("send", NOT_RUNNING, "hello"), 1),
    (("trace", "show", "not-an-id"), 2),
])
def test_operator_failures_are_one_json_object(capsys: pytest.CaptureFixture[str],
                                               murmur_home: Path, argv: tuple[str, ...],
                                               status: int) -> None:
    got, document, err = run(capsys, *argv, "--json")
    assert (got, err) == (status, "")
    assert document["ok"] is False and document["exit_status"] == status
    assert document["command"] == "mur " + " ".join(argv[:2] if argv[0] == "trace" else argv[:1])
    assert isinstance(document["error"], str) and document["error"]


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
    assert document["admitted"] is False and document["warnings"] == []
    error = document["error"]
    assert isinstance(error, dict) and error["path"] == "--project"
    assert str(missing) in str(error["message"])
