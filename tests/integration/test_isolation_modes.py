"""``--isolation`` on a real ``mur run --roster`` (docs/isolation.md): the launcher prints
W-SEC-014 once for the whole formation where the host offers less than full confinement,
refuses to start anything with ``required`` there (E-RUN-055), and its members take its
choice. An older kernel is played with ``MURMUR_TEST_LANDLOCK_ABI``."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.sandbox.landlock import host_support
from tests.support.formation import launcher_env, member_traces, mur, simple_project

pytestmark = pytest.mark.integration

LISTER = """
import os

async def run(task):
    try:
        os.listdir(os.environ["MURMUR_HOME_TO_TRY"])
    except KeyError:
        return f"{task.member}: no target"
    except OSError as exc:
        return f"{task.member}: refused ({exc.strerror})"
    return f"{task.member}: listed"
"""


def project_of(tmp_path: Path) -> Path:
    return simple_project(tmp_path, ["entry", "peer"], entry="entry",
                          agents={"entry": LISTER, "peer": LISTER})


def run_task(project: Path, murmur_home: Path, *flags: str, **env: str
             ) -> tuple[int, str, str]:
    environ = launcher_env(MURMUR_HOME=str(murmur_home), **env)
    done = mur("run", "--roster", "--project", str(project), "--task", "go", *flags,
               env=environ, cwd=project, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_auto_on_a_kernel_without_tcp_rules_warns_once_for_the_formation(
        tmp_path: Path, murmur_home: Path) -> None:
    status, out, err = run_task(project_of(tmp_path), murmur_home,
                                MURMUR_TEST_LANDLOCK_ABI="3")
    assert status == 0, err
    assert err.count("W-SEC-014") == 1, err
    assert "TCP rules (Landlock ABI 3; they need ABI 4)" in err
    assert out.strip() == "entry: no target"


def test_required_on_such_a_kernel_starts_nothing(tmp_path: Path,
                                                 murmur_home: Path) -> None:
    status, out, err = run_task(project_of(tmp_path), murmur_home, "--isolation",
                                "required", MURMUR_TEST_LANDLOCK_ABI="5")
    assert status == 1
    assert err.startswith("error E-RUN-055: --isolation required: this host cannot "
                          "confine agent code fully"), err
    assert out == ""
    assert not (murmur_home / "formations").exists() or not any(
        (murmur_home / "formations").iterdir())


def confinement_of(murmur_home: Path) -> dict[str, tuple[str, int]]:
    """member -> (isolation, Landlock ABI applied), from each session's trace."""
    found = {}
    for member, records in member_traces(murmur_home / "records").items():
        (started,) = [r for r in records if r["event"] == "agent_process_started"]
        found[member] = (started["isolation"], started["landlock"])
    return found


@pytest.mark.skipif(not host_support().files, reason=host_support().describe())
def test_members_take_the_launchers_choice(tmp_path: Path, murmur_home: Path) -> None:
    project = project_of(tmp_path)
    status, _, err = run_task(project, murmur_home, "--isolation", "off",
                              MURMUR_ISOLATION="required")
    assert status == 0, err
    assert confinement_of(murmur_home) == {"entry": ("off", 0), "peer": ("off", 0)}


@pytest.mark.skipif(host_support().abi < 4, reason=host_support().describe())
def test_a_lowered_abi_is_what_the_agent_process_applies(
        tmp_path: Path, murmur_home: Path) -> None:
    status, _, err = run_task(project_of(tmp_path), murmur_home,
                              MURMUR_TEST_LANDLOCK_ABI="4")
    assert status == 0, err
    assert confinement_of(murmur_home) == {"entry": ("auto", 4), "peer": ("auto", 4)}
