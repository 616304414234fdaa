"""Growing a team as docs/growing-a-team.md says: ``mur new --roster``, then ``mur add``
a third member in one command (its source, its edge, the grants on both ends, packed
and installed, checked), and a formation whose entry member calls it answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.formation import launcher_env, mur

pytestmark = pytest.mark.integration

PLANNER = """async def run(task):
    answer = await (await task.call_member("reviewer", task.text))
    return f"planner heard: {answer}"
"""


def test_mur_add_grows_a_roster_by_a_member_that_answers(tmp_path: Path,
                                                        murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    project = tmp_path / "team"
    assert mur("new", "--roster", str(project), env=env, cwd=tmp_path).returncode == 0
    added = mur("add", "reviewer", "--project", str(project), env=env, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert "added member reviewer" in added.stdout and "planner -> reviewer" in added.stdout
    assert "W-RUN-008" not in added.stderr and "E-" not in added.stderr
    [agent] = (project / "planner").glob("*_agent.py")
    agent.write_text(PLANNER)
    done = mur("run", "--roster", "--project", str(project), "--rebuild", "--task", "hello",
               env=env, cwd=project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("planner heard: "), done.stdout
    assert "hello" in done.stdout


def test_mur_add_grants_a_caller_that_could_not_reach_doors(tmp_path: Path,
                                                           murmur_home: Path) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    project = tmp_path / "team"
    assert mur("new", "--roster", str(project), env=env, cwd=tmp_path).returncode == 0
    worker = (project / "worker" / "murmur.yaml").read_text()
    assert "allow" not in worker
    added = mur("add", "checker", "--project", str(project), "--called-by", "worker",
                env=env, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    assert "granted worker/murmur.yaml" in added.stdout
    assert "allow: [localhost]" in (project / "worker" / "murmur.yaml").read_text()
    doctor = mur("doctor", "--project", str(project), env=env, cwd=project)
    assert doctor.returncode == 0 and "W-RUN-008" not in doctor.stderr, doctor.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["planner"], "already has a member `planner`"),
    (["extra", "--calls", "nobody"], "has no member `nobody`"),
    (["extra", "--calls", "planner"], "no member may call the entry member"),
])
def test_mur_add_refuses_what_cannot_be_added_and_writes_nothing(
        tmp_path: Path, murmur_home: Path, args: list[str], words: str) -> None:
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    project = tmp_path / "team"
    assert mur("new", "--roster", str(project), env=env, cwd=tmp_path).returncode == 0
    before = (project / "roster.yaml").read_text()
    refused = mur("add", *args, "--project", str(project), env=env, cwd=tmp_path)
    assert refused.returncode == 2 and words in refused.stderr, refused.stderr
    assert (project / "roster.yaml").read_text() == before
    assert not (project / "extra").exists()
