"""A gateway upstream run from a virtual environment of its own, outside every path the
sandbox grants, on a real ``mur run --roster`` with isolation on (docs/isolation.md, "The
program's environment"): the environment and the Python it was made with are granted
read and execute; a path the upstream still may not read is named in ``E-RUN-049`` with
the grant that allows it (``capabilities.filesystem.read``), never "run it by hand"."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from launcher.sandbox.landlock import host_support
from tests.support import third_party
from tests.support.formation import install_capsule, launcher_env, mur, write_roster
from tests.support.gateway_capsules import gateway_capsule

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not host_support().files, reason="this kernel has no Landlock: "
                       "nothing is confined, so nothing is granted"),
]

#: Starts the a2a-sdk agent after reading the file its first argument names (a model).
READS_A_MODEL = """
import runpy, sys

with open(sys.argv[1], "rb") as model:
    model.read(16)
sys.argv = ["sdk_agent.py", *sys.argv[2:]]
runpy.run_path("sdk_agent.py", run_name="__main__")
"""


def outside_venv(root: Path) -> Path:
    """A virtual environment under the test's temporary folder (which no sandbox grants),
    made with the Python running the tests, seeing the test venv's packages through a
    ``.pth`` file (those are granted: they are the runtime's own)."""
    venv = root / "framework-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    purelib = sysconfig.get_paths()["purelib"]
    (next(venv.glob("lib/python3*/site-packages")) / "test-packages.pth").write_text(
        purelib + "\n")
    return venv


def project_with(tmp_path: Path, command: list[str], *, extra_manifest: str = "",
                 files: dict[str, str] | None = None) -> Path:
    source = gateway_capsule(tmp_path / "src" / "upstream", "upstream", command)
    (source / "sdk_agent.py").write_text(third_party.SDK_AGENT.read_text())
    (source / "reads_model.py").write_text(textwrap.dedent(READS_A_MODEL))
    for name, text in (files or {}).items():
        (source / name).write_text(text)
    if extra_manifest:
        manifest = source / "murmur.yaml"
        manifest.write_text(manifest.read_text().replace(
            "capabilities:\n  network: {allow: [localhost]}\n",
            "capabilities:\n  network: {allow: [localhost]}\n" + extra_manifest))
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    install_capsule(project, source)
    write_roster(project, [("upstream", True)])
    return project


def run_task(project: Path, murmur_home: Path) -> subprocess.CompletedProcess[str]:
    return mur("run", "--roster", "--project", str(project), "--task", "hello",
               "--isolation", "required", env=launcher_env(MURMUR_HOME=str(murmur_home)),
               cwd=project, timeout=180)


def test_an_upstream_in_its_own_venv_outside_the_granted_paths_starts_confined(
        tmp_path: Path, murmur_home: Path) -> None:
    venv = outside_venv(tmp_path)
    project = project_with(tmp_path, [str(venv / "bin" / "python"), "sdk_agent.py",
                                      "--port", "{port}", "--name", "upstream"])
    done = run_task(project, murmur_home)
    assert done.returncode == 0, done.stderr
    assert "heard: hello" in done.stdout


def test_a_path_the_sandbox_denies_at_start_is_named_with_its_grant(
        tmp_path: Path, murmur_home: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "weights.bin").write_bytes(os.urandom(64))
    command = ["python3", "reads_model.py", str(models / "weights.bin"), "--port", "{port}",
               "--name", "upstream"]
    denied = run_task(project_with(tmp_path / "denied", command), murmur_home)
    assert denied.returncode != 0
    assert "E-RUN-049" in denied.stderr
    assert f"the sandbox denied it `{models / 'weights.bin'}`" in denied.stderr
    assert f"add `{models}` to `capabilities.filesystem.read`" in denied.stderr
    assert "by hand" not in denied.stderr

    granted = run_task(project_with(tmp_path / "granted", command,
                                    extra_manifest=f"  filesystem: {{read: [{models}]}}\n"),
                       murmur_home)
    assert granted.returncode == 0, granted.stderr
    assert "heard: hello" in granted.stdout


def test_a_granted_path_is_never_writable(tmp_path: Path, murmur_home: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "weights.bin").write_bytes(b"w")
    writer = ("import runpy, sys\n"
              "try:\n"
              "    open(sys.argv[1], 'a').close()\n"
              "    print('WROTE', file=sys.stderr)\n"
              "except OSError as exc:\n"
              "    print('REFUSED', exc.errno, file=sys.stderr)\n"
              "sys.argv = ['sdk_agent.py', *sys.argv[2:]]\n"
              "runpy.run_path('sdk_agent.py', run_name='__main__')\n")
    project = project_with(tmp_path, ["python3", "writer.py", str(models / "weights.bin"),
                                      "--port", "{port}", "--name", "upstream"],
                           extra_manifest=f"  filesystem: {{read: [{models}]}}\n",
                           files={"writer.py": writer})
    done = run_task(project, murmur_home)
    assert done.returncode == 0, done.stderr
    assert "REFUSED 13" in done.stderr and "WROTE" not in done.stderr
