"""Helpers for the third-party A2A test agents (no tests here): where the agents are, the
argv that starts each, the skip when Node or its packages (or a Python with a2a-sdk 0.3)
are missing, and a context manager that starts an agent on a free 127.0.0.1 port, waits
for its card and reads its stderr log (the request lines and the environment-names
line)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
AGENTS_DIR = ROOT / "tests" / "agents"
SDK_AGENT = AGENTS_DIR / "sdk_agent.py"
#: The a2a-sdk 0.3 agent that answers as BeeAI does; run by :func:`v03_python`.
SDK_V03_AGENT = AGENTS_DIR / "sdk_v03_agent.py"
#: Where ``make frameworks`` makes each framework's venv (tests/frameworks reads it too),
#: and those of them that hold a2a-sdk 0.3 with its HTTP server, first the smallest.
FRAMEWORK_VENVS = Path(os.environ.get("MURMUR_FRAMEWORK_VENVS",
                                      Path.home() / ".cache" / "murmur-door" / "frameworks"))
V03_VENVS = ("adk_v03", "strands", "crewai")
#: The a2a-sdk agent whose reply is only in its task's history (agent-framework-a2a's way).
HISTORY_AGENT = AGENTS_DIR / "history_agent.py"
JS_AGENT_DIR = AGENTS_DIR / "js"
JS_AGENT = JS_AGENT_DIR / "server.mjs"
JS_SDK_PACKAGE = JS_AGENT_DIR / "node_modules" / "@a2a-js" / "sdk" / "package.json"
#: The peers @a2a-js/sdk's gRPC client (``@a2a-js/sdk/client/grpc``) imports.
JS_GRPC_PEERS = ("@grpc/grpc-js", "@bufbuild/protobuf")
CARD_PATH = "/.well-known/agent-card.json"
CARD_WAIT_S = 15.0
STOP_WAIT_S = 5.0

Port = int | str | None  # a number, a placeholder such as "{port}", or None for PORT


def _port_args(port: Port) -> list[str]:
    return [] if port is None else ["--port", str(port)]


def _name_args(name: str | None) -> list[str]:
    return [] if name is None else ["--name", name]


def sdk_command(port: Port = None, name: str | None = None,
                python: str = sys.executable) -> list[str]:
    """argv of the a2a-sdk agent; ``python`` must have a2a-sdk[http-server] (the venv's)."""
    return [python, str(SDK_AGENT), *_port_args(port), *_name_args(name)]


def node_command(port: Port = None, name: str | None = None) -> list[str]:
    """argv of the @a2a-js/sdk agent (node from PATH, absolute script path)."""
    node = shutil.which("node") or "node"
    return [node, str(JS_AGENT), *_port_args(port), *_name_args(name)]


def require_node() -> None:
    """Skip the calling test, with the reason, unless the Node agent can run."""
    if shutil.which("node") is None:
        pytest.skip("no node on PATH: the @a2a-js/sdk agent cannot run")
    if not JS_SDK_PACKAGE.exists():
        pytest.skip(f"{JS_AGENT_DIR / 'node_modules'} is missing: run `make js-agents`")


def require_node_grpc() -> None:
    """Skip the calling test, with the reason, unless @a2a-js/sdk's gRPC client can run:
    the Node agent's packages and the gRPC peers package.json pins."""
    require_node()
    missing = [peer for peer in JS_GRPC_PEERS
               if not (JS_AGENT_DIR / "node_modules" / peer / "package.json").exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing from {JS_AGENT_DIR / 'node_modules'}: "
                    "run `make js-agents` (@a2a-js/sdk's gRPC client needs them)")


def v03_python() -> Path:
    """A Python with a2a-sdk 0.3 and its HTTP server: a framework venv that pins it
    (``make frameworks`` makes them); skips the calling test, saying so, when none is."""
    for name in V03_VENVS:
        python = FRAMEWORK_VENVS / name / "bin" / "python"
        if (FRAMEWORK_VENVS / name / ".installed").exists() and python.exists():
            return python
    pytest.skip(f"no venv with a2a-sdk 0.3 under {FRAMEWORK_VENVS} ({', '.join(V03_VENVS)}): "
                "`make frameworks` makes them")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RunningAgent:
    """A started agent: its base URL, its process and its stderr log file."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def lines(self, marker: str) -> list[str]:
        prefix = f"{self.name} {marker}: "
        return [line[len(prefix):] for line in self.log().splitlines() if line.startswith(prefix)]

    def requests(self) -> list[dict[str, Any]]:
        """Every logged request: {"method", "path", "headers": [[name, value], ...]}."""
        return [json.loads(line) for line in self.lines("request")]

    def environment_names(self) -> list[str]:
        found = self.lines("environment")
        return found[0].split() if found else []

    def card(self) -> dict[str, Any]:
        response = httpx.get(self.url.rstrip("/") + CARD_PATH, timeout=5.0)
        response.raise_for_status()
        return dict(response.json())


def wait_for_card(agent: RunningAgent, timeout: float = CARD_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.process.poll() is not None:
            raise RuntimeError(f"{agent.name} exited with {agent.process.returncode}:\n"
                               f"{agent.log()}")
        try:
            if httpx.get(agent.url.rstrip("/") + CARD_PATH, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{agent.name} served no card within {timeout} s:\n{agent.log()}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_WAIT_S)


@contextmanager
def running_agent(command_for: Callable[[int], list[str]], name: str, *,
                  env: Mapping[str, str] | None = None,
                  log_dir: Path | None = None,
                  port: int | None = None) -> Iterator[RunningAgent]:
    """Start ``command_for(port)`` on ``port`` (else a free one), wait for its card, stop
    it after.

    ``env`` replaces the environment when given (pass ``{**os.environ, ...}`` to extend).
    The log is ``<log_dir>/<name>.stderr`` (a temporary folder when no ``log_dir``).
    """
    with tempfile.TemporaryDirectory(prefix="third-party-") as scratch:
        folder = log_dir or Path(scratch)
        log_path = folder / f"{name}.stderr"
        port = port or free_port()
        with log_path.open("wb") as log:
            process = subprocess.Popen(command_for(port), stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=log,
                                       env=None if env is None else dict(env))
        agent = RunningAgent(name=name, port=port, process=process, log_path=log_path)
        try:
            wait_for_card(agent)
            yield agent
        finally:
            stop(process)


def sdk_agent(name: str = "sdk-agent", **options: Any) -> AbstractContextManager[RunningAgent]:
    """``running_agent`` for the a2a-sdk agent."""
    return running_agent(lambda port: sdk_command(port, name), name, **options)


def js_agent(name: str = "js-agent", **options: Any) -> AbstractContextManager[RunningAgent]:
    """``running_agent`` for the @a2a-js/sdk agent; call ``require_node()`` first."""
    return running_agent(lambda port: node_command(port, name), name, **options)
