"""The developer loop: a python agent checked without running it (E-ROS-010), a member
whose source in the project differs from what is installed (W-ROS-003), and
``mur run --roster --rebuild`` packing and installing every member's source first."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from launcher.admission.agent_check import python_agent_problem
from launcher.admission.roster import admit
from launcher.admission.sources import project_sources, rebuild, source_warnings
from launcher.admission.store import install, pack
from launcher.cli import main
from launcher.diagnostics import DiagnosticError

MANIFEST = """manifest_version: 1
name: {name}
version: 1.0.0
agent: {{python: {name}_agent:run}}
"""
ROSTER = """roster_version: 1
members:
  - {name: boss, capsule: local/boss, version: 1.0.0, entry: true}
  - {name: helper, capsule: local/helper, version: 1.0.0}
"""


def source(project: Path, name: str, agent: str) -> Path:
    folder = project / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "murmur.yaml").write_text(MANIFEST.format(name=name))
    (folder / f"{name}_agent.py").write_text(agent)
    return folder


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "roster.yaml").write_text(ROSTER)
    for name in ("boss", "helper"):
        folder = source(root, name, "async def run(task):\n    return 'v1'\n")
        install(pack(folder, tmp_path / f"{name}.mur.zip").path, root)
    return root


def artifact_with(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "a.mur.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(name, text)
    return path


@pytest.mark.parametrize(("text", "words"), [
    ("async def run(task)\n    return 1\n", "agent.py, line 1"),
    ("def run(task):\n    return 1\n", "run is not async"),
    ("async def other(task):\n    return 1\n", "defines no 'run'"),
])
def test_an_agent_that_cannot_run_is_named_with_its_file_and_line(
        tmp_path: Path, text: str, words: str) -> None:
    problem = python_agent_problem(artifact_with(tmp_path, "agent.py", text), "agent:run")
    assert problem is not None and words in problem


@pytest.mark.parametrize("text", [
    "async def run(task):\n    return 1\n",
    "from .impl import run\n",
    "class Agent:\n    async def __call__(self, task):\n        return 1\nrun = Agent()\n",
])
def test_an_agent_that_can_run_passes_without_running(tmp_path: Path, text: str) -> None:
    text += "\nraise SystemExit('never run')\n"
    assert python_agent_problem(artifact_with(tmp_path, "agent.py", text), "agent:run") is None


def test_a_syntax_error_refuses_admission_with_e_ros_010(project: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    broken = source(project, "helper", "async def run(task)\n    return 'v2'\n")
    install(pack(broken, tmp_path / "broken.mur.zip").path, project, force=True)
    with pytest.raises(DiagnosticError) as refused:
        admit(project)
    assert refused.value.code == "E-ROS-010"
    assert "helper_agent.py, line 1" in refused.value.diagnostic.message
    assert main(["doctor", "--project", str(project)]) == 1
    assert "error E-ROS-010" in capsys.readouterr().err


def test_an_edited_source_is_named_until_it_is_rebuilt(project: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert source_warnings(admit(project)) == []
    source(project, "helper", "async def run(task):\n    return 'v2'\n")
    [warning] = source_warnings(admit(project))
    assert (warning.code, warning.path) == ("W-ROS-003", "members[1]")
    assert "`helper`" in warning.message and "--rebuild" in warning.hint
    assert main(["doctor", "--project", str(project), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [w["code"] for w in report["warnings"]] == ["W-ROS-003"]
    done = rebuild(project)
    assert [(name, changed) for name, _, changed in done] == [("boss", False), ("helper", True)]
    assert source_warnings(admit(project)) == []


def test_sources_are_the_project_and_the_folders_directly_under_it(project: Path) -> None:
    (project / ".hidden").mkdir()
    (project / ".hidden" / "murmur.yaml").write_text(MANIFEST.format(name="hidden"))
    (project / "notes").mkdir()
    found = project_sources(project)
    assert sorted(found) == [("local/boss", "1.0.0"), ("local/helper", "1.0.0")]


def test_rebuild_is_a_roster_flag_only(project: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    status = main(["run", "--capsule", "local/boss", "--capsule-version", "1.0.0",
                   "--project", str(project), "--rebuild"])
    assert status == 2 and "--rebuild is taken with --roster only" in capsys.readouterr().err


REQUIRING = """manifest_version: 1
name: needy
version: 1.0.0
agent:
  python: needy_agent:run
  requires: [{requires}]
"""


def needy_project(tmp_path: Path, requires: str) -> Path:
    root = tmp_path / "needy-project"
    root.mkdir()
    folder = root / "needy"
    folder.mkdir()
    (folder / "murmur.yaml").write_text(REQUIRING.format(requires=requires))
    (folder / "needy_agent.py").write_text("async def run(task):\n    return 'ok'\n")
    install(pack(folder, tmp_path / "needy.mur.zip").path, root)
    (root / "roster.yaml").write_text(
        "roster_version: 1\nmembers:\n"
        "  - {name: needy, capsule: local/needy, version: 1.0.0, entry: true}\n")
    return root


@pytest.mark.parametrize(("requires", "words"), [
    ("murmur-no-such-distribution", "`murmur-no-such-distribution` (not installed)"),
    ("'pytest<1'", "pytest "),
])
def test_a_missing_requirement_refuses_admission_naming_the_pip_install(
        tmp_path: Path, murmur_home: Path, requires: str, words: str) -> None:
    project = needy_project(tmp_path, requires)
    with pytest.raises(DiagnosticError) as refused:
        admit(project)
    assert refused.value.code == "E-ROS-011"
    assert words in refused.value.diagnostic.message
    assert "-m pip install" in refused.value.diagnostic.hint


def test_requirements_that_are_met_admit(tmp_path: Path, murmur_home: Path) -> None:
    project = needy_project(tmp_path, "'pytest>=1', 'pyyaml'")
    assert admit(project).members[0].manifest.agent.requires == ["pytest>=1", "pyyaml"]


def test_a_requirement_that_is_not_one_is_e_man_001() -> None:
    from launcher.admission.manifest import parse_manifest

    with pytest.raises(DiagnosticError) as refused:
        parse_manifest(REQUIRING.format(requires="'not a requirement!!'"))
    assert refused.value.code == "E-MAN-001"
    assert "agent.requires" in refused.value.diagnostic.message


def test_mur_run_capsule_refuses_a_missing_requirement_with_e_run_054(
        tmp_path: Path, murmur_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = needy_project(tmp_path, "murmur-no-such-distribution")
    status = main(["run", "--capsule", "local/needy", "--capsule-version", "1.0.0",
                   "--project", str(project), "--task", "hi"])
    err = capsys.readouterr().err
    assert status == 1 and "error E-RUN-054" in err and "pip install" in err


# --- a member's source that does not pack is never silent (issue: the newcomer hour) ---


@pytest.mark.parametrize("typo", ["lifecyle: {concurrency: 2}\n", "pyhton: 3\n"])
def test_a_typo_in_a_members_manifest_is_named_by_doctor_and_rebuild_runs_nothing(
        project: Path, typo: str, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = project / "helper" / "murmur.yaml"
    manifest.write_text(manifest.read_text() + typo)
    assert main(["doctor", "--project", str(project)]) == 0   # what is installed still runs
    err = capsys.readouterr().err
    assert "warning W-ROS-005" in err and "member `helper` in `helper` does not pack" in err
    assert "E-MAN-001" in err and "helper/murmur.yaml" in err
    assert main(["doctor", "--project", str(project), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [w["code"] for w in report["warnings"]] == ["W-ROS-005"]
    from launcher.admission.sources import RebuildRefused

    before = sorted(path.name for path in (project / ".murmur").rglob("*.mur.zip"))
    with pytest.raises(RebuildRefused) as refused:
        rebuild(project)
    [fault] = refused.value.diagnostics
    assert (fault.code, fault.path) == ("E-ROS-013", "members[1]")
    assert "nothing was installed" in fault.message
    assert sorted(path.name for path in (project / ".murmur").rglob("*.mur.zip")) == before


def test_rebuild_names_every_member_whose_source_does_not_pack(project: Path) -> None:
    for name in ("boss", "helper"):
        manifest = project / name / "murmur.yaml"
        manifest.write_text(manifest.read_text() + "lifecyle: {}\n")
    from launcher.admission.sources import RebuildRefused

    with pytest.raises(RebuildRefused) as refused:
        rebuild(project)
    assert [(d.code, d.path) for d in refused.value.diagnostics] == [
        ("E-ROS-013", "members[0]"), ("E-ROS-013", "members[1]")]


def test_in_a_new_project_the_typo_is_named_before_not_installed(
        tmp_path: Path, murmur_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    (root / "roster.yaml").write_text(ROSTER)
    for name in ("boss", "helper"):
        source(root, name, "async def run(task):\n    return 'v1'\n")
    (root / "helper" / "murmur.yaml").write_text(
        (root / "helper" / "murmur.yaml").read_text() + "lifecyle: {}\n")
    assert main(["doctor", "--project", str(root)]) == 1
    err = capsys.readouterr().err
    assert err.index("W-ROS-005") < err.index("E-ROS-007"), err
    assert "lifecyle" in err


def test_a_source_that_packs_no_more_is_named_beside_what_runs(
        project: Path) -> None:
    (project / "helper" / "helper_agent.py").unlink()   # the entry its manifest names
    [warning] = source_warnings(admit(project))
    assert warning.code == "W-ROS-005" and "`helper`" in warning.message
