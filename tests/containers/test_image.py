"""murmur-door's image with a real engine: it builds offline from the wheelhouse, runs as
a non-root user under an init, runs a formation's task, and ends a serving formation on
`docker stop` with every member gone (docs/containers.md)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.containers.conftest import docker

pytestmark = pytest.mark.containers

ROOT = Path(__file__).resolve().parents[2]


def demo_project(tmp_path: Path) -> Path:
    """`mur new --roster`'s two members, packed and installed, readable by the image's user."""
    home = tmp_path / "host-home"
    made = subprocess.run([sys.executable, "-m", "launcher.cli", "new", "--roster", "demo"],
                          cwd=tmp_path, env={"MURMUR_HOME": str(home), "PATH": "/usr/bin:/bin",
                                             "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "demo"
    for path in [project, *project.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    tmp_path.chmod(0o755)
    return project


def test_the_image_runs_mur_as_a_non_root_user_under_an_init(image: str) -> None:
    assert docker("run", "--rm", "--entrypoint", "id", image, "-u").stdout.strip() != "0"
    version = docker("run", "--rm", image, "--version").stdout.strip()
    assert version.startswith("mur ")
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["Entrypoint"] == ["dumb-init", "--", "mur"]
    assert config["User"] == "murmur"
    assert config["Healthcheck"]["Test"][0] == "CMD"


def test_a_formation_runs_its_task_in_a_container(image: str, tmp_path: Path) -> None:
    project = demo_project(tmp_path)
    done = docker("run", "--rm", "--volume", f"{project}:/project", image, "run", "--roster",
                  "--project", "/project", "--task", "hello from a container", timeout=180)
    assert done.stdout.strip().endswith("worker: done: part 1 of 1: hello from a container"), \
        done.stdout + done.stderr


def test_docker_stop_ends_a_serving_formation_with_no_member_left(
        image: str, tmp_path: Path, containers: list[str]) -> None:
    project = demo_project(tmp_path)
    name = f"murmur-test-{secrets.token_hex(4)}"
    containers.append(name)
    docker("run", "--detach", "--name", name, "--volume", f"{project}:/project", image,
           "run", "--roster", "--project", "/project", "--publish", "0.0.0.0:8080")
    until = time.monotonic() + 90
    while "ENTRY" not in logs(name) and time.monotonic() < until:
        time.sleep(0.5)
    assert "ENTRY" in logs(name), logs(name)
    running = docker("top", name, "-o", "pid,args").stdout
    assert running.count("launcher.template") + running.count("mur run") >= 2, running
    started = time.monotonic()
    docker("stop", "--time", "30", name, timeout=60)
    took = time.monotonic() - started
    state = json.loads(docker("inspect", name).stdout)[0]["State"]
    # SIGTERM reached the launcher through the init, which wound every member down
    # and exited 0 well within the grace (a kill after it would be 137).
    assert state["ExitCode"] == 0, docker("logs", name).stderr
    assert took < 25, took


def logs(name: str) -> str:
    done = docker("logs", name)
    return done.stdout + done.stderr
