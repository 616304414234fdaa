"""``mur run --roster --rebuild`` as a developer uses it: write a roster with ``mur new
--roster``, edit an agent, and run again: without ``--rebuild`` the old code runs and
W-ROS-003 says so; with it the edit runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.formation import launcher_env, mur

pytestmark = pytest.mark.integration

EDITED = "async def run(task):\n    return 'the edited planner heard: ' + task.text\n"


def test_an_edited_agent_runs_after_rebuild(tmp_path: Path, murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    project = tmp_path / "demo"
    made = mur("new", "--roster", str(project), env=env, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    [agent] = (project / "planner").glob("*_agent.py")
    agent.write_text(EDITED)
    stale = mur("run", "--roster", "--project", str(project), "--task", "hello", env=env,
                cwd=project)
    assert stale.returncode == 0, stale.stderr
    assert "edited" not in stale.stdout
    assert "warning W-ROS-003" in stale.stderr and "--rebuild" in stale.stderr
    fresh = mur("run", "--roster", "--project", str(project), "--task", "hello",
                "--rebuild", env=env, cwd=project)
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout == "the edited planner heard: hello\n"
    assert "rebuilt local/planner 0.1.0" in fresh.stderr and "W-ROS-003" not in fresh.stderr
    assert not list((project / ".murmur").glob("rebuild/*.mur.zip"))  # no zip files pile up


def test_a_typo_in_a_members_manifest_is_never_silent(tmp_path: Path,
                                                     murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    project = tmp_path / "demo"
    assert mur("new", "--roster", str(project), env=env, cwd=tmp_path).returncode == 0
    assert mur("run", "--roster", "--project", str(project), "--task", "hi", "--rebuild",
               env=env, cwd=project).returncode == 0
    [agent] = (project / "planner").glob("*_agent.py")
    agent.write_text(EDITED)
    manifest = project / "planner" / "murmur.yaml"
    manifest.write_text(manifest.read_text() + "lifecyle: {concurrency: 2}\n")
    refused = mur("run", "--roster", "--project", str(project), "--task", "hello",
                  "--rebuild", env=env, cwd=project)
    assert refused.returncode == 1, refused.stderr
    assert "error E-ROS-013" in refused.stderr and "lifecyle" in refused.stderr
    assert refused.stdout == ""           # nothing started, the old code did not run
    stale = mur("run", "--roster", "--project", str(project), "--task", "hello", env=env,
                cwd=project)
    assert stale.returncode == 0, stale.stderr
    assert "warning W-ROS-005" in stale.stderr and "edited" not in stale.stdout
