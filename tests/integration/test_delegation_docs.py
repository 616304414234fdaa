"""docs/delegation.md runs as written: its files are written, its commands run in a
fresh folder (``mur`` being this checkout's), and the answer is the one the page shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "delegation.md").read_text(encoding="utf-8")
FILES = re.compile(r"```(?:yaml|python)\n# file: (?P<path>\S+)\n(?P<body>.*?)```", re.S)
CONSOLE = re.compile(r"```console\n(?P<body>.*?)```", re.S)


def test_the_page_example_runs_as_written(tmp_path: Path, murmur_home: Path) -> None:
    files = list(FILES.finditer(PAGE))
    assert {match["path"] for match in files} == {
        "summarizer/murmur.yaml", "summarizer/summarizer_agent.py", "boss/murmur.yaml",
        "boss/boss_agent.py"}
    for match in files:
        target = tmp_path / match["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(match["body"], encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "mur"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m launcher.cli "$@"\n')
    shim.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith("MURMUR_")}
    env.update(MURMUR_HOME=str(murmur_home), MURMUR_HOST_WARNINGS_REPORTED="1",
               PYTHONPATH=str(ROOT), PATH=f"{bin_dir}:{env.get('PATH', '')}")
    [console] = CONSOLE.finditer(PAGE)
    lines = console["body"].splitlines()
    commands = [line[2:] for line in lines if line.startswith("$ ")]
    expected = [line for line in lines if not line.startswith("$ ")]
    output = ""
    for command in commands:
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env,  # noqa: S602
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        output = done.stdout
    assert output.splitlines() == expected
