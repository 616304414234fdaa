"""The Makefile's check of PYTHON (scripts/venv_python.sh): a Python that does not run or
is older than 3.11 stops make with a message naming the fix; a .venv made by another
Python (or half made) is removed, so the next step makes it afresh; a .venv made by
PYTHON is kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def check(python: str, venv: Path) -> str:
    done = subprocess.run(["sh", str(ROOT / "scripts" / "venv_python.sh"), python, str(venv)],
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def fake_python(path: Path, prints: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{prints}'\n")
    path.chmod(0o755)
    return path


def test_a_python_that_does_not_run_or_is_too_old_is_named_with_the_fix(
        tmp_path: Path) -> None:
    assert "does not run" in check(str(tmp_path / "nowhere"), tmp_path / "venv")
    old = fake_python(tmp_path / "old" / "python", "False linux 3.9.18 /usr")
    assert "needs Python 3.11 or later" in check(str(old), tmp_path / "venv")


def test_a_venv_made_by_another_python_is_removed_and_ours_is_kept(tmp_path: Path,
                                                                  murmur_home: Path) -> None:
    venv = tmp_path / "venv"
    fake_python(venv / "bin" / "python", "True linux 3.12.1 /opt/other")
    assert check(sys.executable, venv) == ""
    assert not venv.exists()
    half = tmp_path / "half"
    (half / "bin").mkdir(parents=True)       # a venv whose python was never made
    assert check(sys.executable, half) == "" and not half.exists()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    assert check(sys.executable, venv) == ""
    assert (venv / "bin" / "python").exists()
