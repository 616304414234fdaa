"""``make demo`` (``python -m launcher.demo``): a real formation end to end, then what an
operator reads after it (the call tree, the logs, the audit), every line a person can
read, and the folder kept with the commands to go on from there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.formation import launcher_env

pytestmark = pytest.mark.integration


def test_the_demo_runs_a_formation_shows_what_happened_and_keeps_its_folder(
        tmp_path: Path) -> None:
    env = launcher_env(TMPDIR=str(tmp_path))
    env.pop("MURMUR_HOME", None)
    done = subprocess.run([sys.executable, "-m", "launcher.demo", "--task", "hello there"],
                          env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "- worker: done: part 1 of 1: hello there" in out
    assert "--tree\n" in out and "2 tasks, 1 call" in out
    assert "[worker] worker: working on 'part 1 of 1: hello there'" in out  # mur logs
    assert "all along the 1 admitted edge" in out and "nothing is running" in out
    assert not [line for line in out.splitlines() if line.startswith("{")]  # no raw JSON
    [folder] = [path for path in tmp_path.iterdir() if path.name.startswith("murmur-demo-")]
    assert f"To remove it: rm -rf {folder}" in out
    assert (folder / "demo" / "roster.yaml").is_file()
    assert f"export MURMUR_HOME={folder / 'home'}" in out
    assert os.listdir(folder / "home" / "records")
