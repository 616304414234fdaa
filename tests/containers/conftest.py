"""Fixtures of the container tests (``make test-containers``): an engine that runs, the
image built from this checkout (docker/Dockerfile, from a wheelhouse made here), and a
test image holding the a2a-sdk agent. Each skips, saying why, where there is no engine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("MURMUR_IMAGE", "murmur-door:latest")
BASE_IMAGE = os.environ.get("MURMUR_BASE_IMAGE", "python:3.11-slim")
AGENT_IMAGE = "murmur-test-agent:latest"
BUILD_SECONDS = 600


def docker(*args: str, timeout: float = 120, check: bool = True,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stderr.strip()[-2000:]}")
    return done


@pytest.fixture(scope="session")
def engine() -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker command: no container engine to run the tests with")
    info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                          capture_output=True, text=True, timeout=60, check=False)
    if info.returncode != 0:
        pytest.skip(f"no container engine runs here: {info.stderr.strip()[-300:]}")


def wheels(folder: Path, *requirements: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir",
                    str(folder), *requirements], cwd=ROOT, check=True, timeout=BUILD_SECONDS)


@pytest.fixture(scope="session")
def image(engine: None) -> str:
    """murmur-door's image, built as `make image` builds it (no network in the build)."""
    wheelhouse = ROOT / "docker" / "wheelhouse"
    for old in wheelhouse.glob("*.whl"):
        old.unlink()
    wheels(wheelhouse, ".[grpc]", "dumb-init")   # the image serves gRPC too
    base = subprocess.run(["sh", str(ROOT / "docker" / "base-image.sh"), BASE_IMAGE],
                          capture_output=True, text=True, timeout=BUILD_SECONDS, check=False)
    if base.returncode != 0:
        pytest.skip(f"no base image to build from: {base.stderr.strip()[-300:]}")
    docker("build", "--file", "docker/Dockerfile", "--build-arg",
           f"BASE_IMAGE={base.stdout.strip()}", "--tag", IMAGE, str(ROOT),
           timeout=BUILD_SECONDS)
    return IMAGE


AGENT_DOCKERFILE = """
FROM {image}
USER root
COPY wheels/ /tmp/wheels/
RUN /opt/murmur/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels \\
        "a2a-sdk[http-server]" && rm -rf /tmp/wheels
COPY sdk_agent.py /agent/sdk_agent.py
USER murmur
ENTRYPOINT []
"""


@pytest.fixture(scope="session")
def agent_image(image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image holding tests/agents/sdk_agent.py and a2a-sdk: an existing A2A agent."""
    context = tmp_path_factory.mktemp("agent-image")
    wheels(context / "wheels", "a2a-sdk[http-server]~=1.3")
    shutil.copy(ROOT / "tests" / "agents" / "sdk_agent.py", context / "sdk_agent.py")
    (context / "Dockerfile").write_text(AGENT_DOCKERFILE.format(image=image))
    docker("build", "--tag", AGENT_IMAGE, str(context), timeout=BUILD_SECONDS)
    return AGENT_IMAGE


@pytest.fixture
def containers() -> Iterator[list[str]]:
    """Names of the containers a test starts; removed at its end, whatever happened."""
    names: list[str] = []
    yield names
    for name in names:
        docker("rm", "--force", name, check=False)
