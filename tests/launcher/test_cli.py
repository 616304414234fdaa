from __future__ import annotations

import subprocess
import sys

import pytest

from launcher import __version__
from launcher.cli import main


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"mur {__version__}"


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: mur" in capsys.readouterr().out


def test_console_script_runs_as_a_process() -> None:
    done = subprocess.run([sys.executable, "-m", "launcher.cli", "--help"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert "roster.yaml" in done.stdout
