"""What a command's program runs from (launcher/sandbox/program_paths.py) and what a
confined program's stderr says the sandbox denied it (launcher/sandbox/denials.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.admission.manifest import Capabilities
from launcher.member.confinement import agent_plan
from launcher.sandbox.denials import StderrTail, denied_path, grant_hint
from launcher.sandbox.program_paths import program_environment, resolve_program


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("venvs") / "framework"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True,
                   timeout=120)
    return folder


def base_prefix_of(venv: Path) -> str:
    home = next(line.split("=", 1)[1].strip() for line in
                (venv / "pyvenv.cfg").read_text().splitlines() if line.startswith("home"))
    return os.path.dirname(os.path.realpath(home))


def test_a_venvs_python_brings_the_venv_and_the_installation_it_was_made_with(
        venv: Path) -> None:
    paths = program_environment(str(venv / "bin" / "python"))
    assert str(venv.resolve()) in paths
    assert base_prefix_of(venv) in paths
    assert os.path.realpath(venv / "bin" / "python") in paths


def test_a_script_in_the_venv_brings_it_too_and_its_shebang_interpreter(
        venv: Path, tmp_path: Path) -> None:
    script = venv / "bin" / "serve-agent"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nprint('hi')\n")
    script.chmod(0o755)
    paths = program_environment(str(script))
    assert str(venv.resolve()) in paths and str(script.resolve()) in paths
    elsewhere = tmp_path / "run.sh"
    elsewhere.write_text("#!/usr/bin/env python3\n")
    via_env = program_environment(str(elsewhere), path=str(venv / "bin"))
    assert str(venv.resolve()) in via_env


def test_a_pth_file_brings_the_folders_it_names(venv: Path, tmp_path: Path) -> None:
    source = tmp_path / "editable-src"
    source.mkdir()
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "editable.pth").write_text(f"{source}\nimport os\n/no/such/folder\n")
    paths = program_environment(str(venv / "bin" / "python"))
    assert str(source) in paths
    assert "/no/such/folder" not in paths and not any("import" in p for p in paths)


def test_a_plain_program_brings_itself_and_a_system_one_widens_nothing(tmp_path: Path) -> None:
    tool = tmp_path / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_bytes(b"\x7fELF")
    assert program_environment(str(tool)) == (str(tool),)
    assert program_environment("/no/such/program") == ()
    assert all(not path.startswith(("/home", "/root")) or "python" in path
               for path in program_environment("/usr/bin/env"))
    assert "/usr" not in program_environment(sys.executable)


def test_a_program_is_found_on_the_commands_path_or_in_the_capsule(
        venv: Path, tmp_path: Path) -> None:
    assert resolve_program("python", cwd=tmp_path, path=str(venv / "bin")) == \
        str(venv / "bin" / "python")  # nothing else on that PATH: it is the one to grant
    assert resolve_program("./run.sh", cwd=tmp_path, path=None) == str(tmp_path / "run.sh")
    assert resolve_program("no-such-program-here", cwd=tmp_path, path="/nowhere") is None


def test_a_bare_name_already_granted_later_on_the_path_adds_nothing(tmp_path: Path) -> None:
    # A pyenv shim first on PATH runs a program outside every grant; before the shim was
    # granted, execvp skipped it (denied) and ran the system's python3: keep it so.
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / "python3"
    shim.write_text("#!/bin/sh\nexec /elsewhere/pyenv exec python3 \"$@\"\n")
    shim.chmod(0o755)
    system = os.path.dirname(os.path.realpath(sys.executable))
    search = f"{shims}{os.pathsep}{system}"
    assert resolve_program("python3", cwd=tmp_path, path=search,
                           granted=lambda candidate: candidate.startswith(system)) is None
    assert resolve_program("python3", cwd=tmp_path, path=search) == str(shim)


def test_the_plan_grants_them_read_only_and_never_murmur_home(venv: Path, tmp_path: Path) -> None:
    home = tmp_path / "murmur"
    home.mkdir()
    plan = agent_plan(home=home, capsule_dir=tmp_path, session_dirs=(), workdir=tmp_path / "w",
                      proxy_port=1, also_read=[*program_environment(
                          str(venv / "bin" / "python")), str(tmp_path)])
    assert str(venv.resolve()) in plan.read
    assert str(venv.resolve()) not in plan.write
    assert str(tmp_path) in plan.withheld  # it holds MURMUR_HOME


@pytest.mark.parametrize(("line", "path"), [
    ("PermissionError: [Errno 13] Permission denied: '/srv/venv/pyvenv.cfg'",
     "/srv/venv/pyvenv.cfg"),
    ("Error: EACCES: permission denied, open '/srv/models/m.gguf'", "/srv/models/m.gguf"),
    ("sh: 1: /srv/bin/agent: Permission denied", "/srv/bin/agent"),
    ("bash: /srv/bin/agent: Permission denied", "/srv/bin/agent"),
    ("ValueError: something else entirely", None),
])
def test_a_refusal_is_read_in_the_words_of_python_node_and_the_shells(
        line: str, path: str | None) -> None:
    assert denied_path(["Traceback (most recent call last):", line]) == path


def test_the_grant_is_the_denied_files_folder(tmp_path: Path) -> None:
    assert grant_hint(str(tmp_path / "models" / "m.bin")) == str(tmp_path / "models")
    assert grant_hint(str(tmp_path)) == str(tmp_path)


async def test_the_tail_copies_every_line_on_and_keeps_the_last(tmp_path: Path) -> None:
    sink = tmp_path / "sink"
    with sink.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys\nfor i in range(100): print(i, file=sys.stderr)",
            stderr=asyncio.subprocess.PIPE)
        assert process.stderr is not None
        tail = StderrTail(out.fileno())
        tail.follow(process.stderr)
        await process.wait()
        await tail.finish()
    assert sink.read_text().split() == [str(i) for i in range(100)]
    assert list(tail.lines)[-1] == "99" and len(tail.lines) == 40


def test_filesystem_read_takes_absolute_paths_only() -> None:
    assert Capabilities.model_validate(
        {"filesystem": {"read": ["/opt/models"]}}).filesystem.read == ["/opt/models"]
    for bad in ("models", "/", "/opt/../etc"):
        with pytest.raises(ValueError, match="absolute path"):
            Capabilities.model_validate({"filesystem": {"read": [bad]}})
