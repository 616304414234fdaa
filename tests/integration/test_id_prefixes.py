"""Ids as a user types them (docs/cli.md, "Ids"): a unique prefix of a formation or
session id works wherever an id does; a prefix that starts several is refused naming
them; ``mur stop`` with no id stops the one formation running in the project."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.home.id_prefixes import AmbiguousId, expand_id
from launcher.home.paths import formations_root
from launcher.ids import new_formation_id
from tests.support.formation import (
    kill_group_quietly,
    launcher_env,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def running(tmp_path: Path, murmur_home: Path) -> Iterator[tuple[Path, dict[str, object]]]:
    project = simple_project(tmp_path, ["solo"], entry="solo")
    process = start_launcher(project, "--json",
                             env=launcher_env(MURMUR_HOME=str(murmur_home)))
    try:
        yield project, read_formation_line(process)
    finally:
        kill_group_quietly(process)
        process.wait()


def test_a_unique_prefix_stands_for_the_id_and_stop_needs_none_in_its_project(
        running: tuple[Path, dict[str, object]], murmur_home: Path) -> None:
    project, line = running
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    formation = str(line["formation_id"])
    members = line["members"]
    assert isinstance(members, list)
    session = str(members[0]["session_id"])
    shown = mur("trace", "show", session[:10], env=env, cwd=project)
    assert shown.returncode == 0 and "session_start" in shown.stdout, shown.stderr
    graph = mur("graph", formation[:9], env=env, cwd=project)
    assert graph.returncode == 0, graph.stderr
    stopped = mur("stop", "--json", env=env, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["id"] == formation
    again = mur("stop", env=env, cwd=project)
    assert again.returncode == 1 and "no formation runs in" in again.stderr


def test_a_prefix_that_starts_several_ids_is_refused_naming_them(murmur_home: Path) -> None:
    root = formations_root()
    root.mkdir(parents=True)
    first = new_formation_id()
    second = first[:-1] + ("0" if first[-1] != "0" else "1")   # the same but its last digit
    for ident in (first, second):
        (root / ident).mkdir()
    with pytest.raises(AmbiguousId) as ambiguous:
        expand_id(first[:-1])
    assert sorted(ambiguous.value.candidates) == sorted([first, second])
    assert expand_id(first) == first
    assert expand_id(first[:6]) == first[:6]          # too short to be a prefix
    assert expand_id("frm_ffffffff") == "frm_ffffffff"   # none: the command says so
    done = mur("stop", first[:-1], env=launcher_env(MURMUR_HOME=str(murmur_home)))
    assert done.returncode == 2 and "starts 2 ids" in done.stderr


def test_ps_all_lists_the_formations_that_ended_newest_first(tmp_path: Path,
                                                            murmur_home: Path) -> None:
    # A formation with a peer keeps a formation directory (one of a single member has none).
    project = simple_project(tmp_path, ["solo", "helper"], entry="solo",
                             reachability={"solo": ["helper"]})
    env = launcher_env(MURMUR_HOME=str(murmur_home))
    ran = []
    for _ in range(2):
        done = mur("run", "--roster", "--project", str(project), "--json", "--task", "hi",
                   env=env, cwd=project)
        assert done.returncode == 0, done.stderr
        ran.append(json.loads(done.stdout.splitlines()[0])["formation_id"])
    listed = json.loads(mur("ps", "-a", "--json", env=env).stdout)
    assert [f["formation_id"] for f in listed["ended"]] == ran[::-1]
    assert listed["ended"][0]["project_dir"] == str(project.resolve())
    assert listed["ended"][0]["started"].endswith("Z")
    text = mur("ps", "-a", env=env).stdout
    assert "ENDED FORMATION" in text and ran[0] in text
    assert "ended" not in json.loads(mur("ps", "--json", env=env).stdout)
