"""``mur doctor`` with no ``--project`` finds roster.yaml in the current folder or the
nearest parent, as git finds .git, and says which file it uses
(launcher/admission/roster_lookup.py); a roster.yaml of another user higher up is never
taken."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import launcher.admission.roster_lookup as lookup
from launcher.cli import main
from tests.support.capsules import install_capsule

ROSTER = "roster_version: 1\nmembers:\n  - {name: a, capsule: local/a, version: 1.0.0, " \
         "entry: true}\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    directory = tmp_path / "project"
    (directory / "a" / "deeper").mkdir(parents=True)
    install_capsule(directory, "a")
    (directory / "roster.yaml").write_text(ROSTER)
    return directory


def doctor(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str, str]:
    status = main(["doctor", *flags])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_doctor_in_a_subfolder_uses_the_nearest_parents_roster_and_says_so(
        project: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project / "a" / "deeper")
    status, out, err = doctor(capsys)
    assert status == 0, err
    assert err == f"mur doctor: using {project / 'roster.yaml'}\n"
    assert out.startswith(f"admitted {project / 'roster.yaml'}: 1 member")
    status, out, err = doctor(capsys, "--json")
    assert status == 0 and err == "" and json.loads(out)["project_dir"] == str(project)


def test_doctor_in_the_projects_own_folder_says_nothing_more(
        project: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    status, _, err = doctor(capsys)
    assert status == 0 and "using" not in err


def test_the_nearest_roster_wins_and_project_names_one_without_a_search(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inner = project / "a"
    (inner / "roster.yaml").write_text(ROSTER)
    assert lookup.roster_project(inner / "deeper") == inner
    assert lookup.project_for(str(tmp_path)) == (tmp_path, None)
    monkeypatch.chdir(inner / "deeper")
    assert lookup.project_for(None) == (inner, inner / "roster.yaml")


def test_no_roster_anywhere_leaves_the_current_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")
    status, _, err = doctor(capsys)
    assert status == 1 and "error E-ROS-001" in err and "using" not in err


def test_a_parent_roster_of_another_user_is_never_taken(
        project: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookup.os, "geteuid", lambda: project.stat().st_uid + 1)
    assert lookup.roster_project(project / "a") is None
    assert lookup.roster_project(project) == project  # the current folder's own is read
    monkeypatch.chdir(project / "a")
    status, _, err = doctor(capsys)
    assert status == 1 and "error E-ROS-001" in err and "using" not in err
