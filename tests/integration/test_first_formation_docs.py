"""docs/first-formation.md runs as written: every ``$ `` line of its console blocks, in
order, in one shell (so ``cd`` and variables carry over), with ``mur`` on the PATH; every
other line of a block must appear in what the commands print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "first-formation.md"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)


def commands_and_output() -> tuple[list[str], list[str]]:
    commands: list[str] = []
    expected: list[str] = []
    for block in BLOCK.findall(PAGE.read_text(encoding="utf-8")):
        for line in block.splitlines():
            if line.startswith("$ "):
                commands.append(line[2:])
            elif line.strip():
                expected.append(line.strip())
    return commands, expected


def test_the_tutorial_runs_as_written(tmp_path: Path, murmur_home: Path) -> None:
    commands, expected = commands_and_output()
    assert len(commands) >= 10
    script = "set -euo pipefail\n" + "\n".join(commands) + "\n"
    bin_dir = Path(sys.executable).parent
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("MURMUR_") or key == "MURMUR_HOME"}
    env.update({"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
                "PYTHONPATH": str(ROOT), "MURMUR_HOME": str(murmur_home)})
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for line in expected:
        assert line in output, f"{line!r} not printed:\n{output}"
