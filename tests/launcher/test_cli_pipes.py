"""``mur`` whose reader goes away (``mur ps --json | head``): no traceback, nothing more
written, the exit status of a program killed by SIGPIPE."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import BROKEN_PIPE_STATUS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [["ps", "--json"], ["explain"], ["ps"]])
def test_a_closed_pipe_ends_mur_quietly(args: list[str], murmur_home: Path) -> None:
    process = subprocess.Popen([sys.executable, "-m", "launcher.cli", *args], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before mur writes a byte
    err = process.stderr.read()
    status = process.wait(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err
    assert status == BROKEN_PIPE_STATUS
