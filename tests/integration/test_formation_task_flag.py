"""``mur run --roster --task``: a task that is empty or unreadable is refused before the
launcher admits the roster or starts any member; run from a folder below the project,
with no ``--project``, it launches the nearest parent's roster.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.formation import mur, simple_project

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("task", ["", "   ", "empty.md"])
def test_an_empty_task_starts_no_member(tmp_path: Path, murmur_home: Path, task: str) -> None:
    project = simple_project(tmp_path, ["boss", "worker"], entry="boss",
                             reachability={"boss": ["worker"]})
    (project / "empty.md").write_text("\n")
    done = mur("run", "--roster", "--project", str(project), "--task", task, cwd=project)
    assert done.returncode == 2, done.stderr
    assert "--task" in done.stderr and "empty" in done.stderr
    assert "[boss]" not in done.stderr and "[worker]" not in done.stderr
    assert not (murmur_home / "running").exists() or not any(
        (murmur_home / "running").iterdir())
    assert not (murmur_home / "formations").exists() and not (murmur_home / "records").exists()
    assert done.stdout == ""


def test_run_roster_in_a_subfolder_launches_the_nearest_parents_roster(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["boss"], entry="boss")
    (project / "notes").mkdir()
    done = mur("run", "--roster", "--task", "hello", cwd=project / "notes")
    assert done.returncode == 0, done.stderr
    assert f"mur run: using {project / 'roster.yaml'}" in done.stderr
    assert "hello" in done.stdout
