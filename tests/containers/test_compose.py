"""docker/compose.gateway.yaml with a real engine: an a2a-sdk agent in one container, the
gateway door in another on a user network, the door published on the host's loopback,
called from the host with a2a-sdk's client and the credential from the secret file;
docker/compose.formation.yaml is checked by compose itself."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState

from launcher.admission.store import install, pack

pytestmark = pytest.mark.containers

ROOT = Path(__file__).resolve().parents[2]


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if probe.returncode == 0:
        return ["docker", "compose"]
    pytest.skip("neither docker-compose nor the compose plugin is installed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def compose(project: str, file: str, env: dict[str, str], *args: str,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*compose_command(), "--project-name", project, "--file",
                           str(ROOT / "docker" / file), *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout, check=False)


def secret_file(folder: Path) -> tuple[str, Path]:
    """A client credential and the file compose reads it from (readable in the container)."""
    token = secrets.token_urlsafe(24)
    path = folder / "client_token"
    path.write_text(token)
    path.chmod(0o644)
    return token, path


def gateway_project(tmp_path: Path) -> Path:
    source = tmp_path / "src" / "gateway"
    source.mkdir(parents=True)
    (source / "murmur.yaml").write_text(
        "manifest_version: 1\nname: gateway\nversion: 1.0.0\n"
        "agent:\n  a2a:\n    url: http://agent:9999\n"
        "network:\n  authentication:\n    bearer:\n"
        "      - {name: client, env: GATEWAY_CLIENT_TOKEN, scopes: [SendMessage, GetTask]}\n")
    project = tmp_path / "gateway-project"
    project.mkdir()
    install(pack(source, tmp_path / "gateway.mur.zip").path, project)
    for path in [tmp_path, project, *project.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return project


@pytest.fixture
def gateway(image: str, agent_image: str, tmp_path: Path
            ) -> Iterator[tuple[str, str]]:
    token, token_file = secret_file(tmp_path)
    port = free_port()
    name = f"murmurgw{secrets.token_hex(3)}"
    env = {"AGENT_IMAGE": agent_image, "MURMUR_IMAGE": image,
           "GATEWAY_PROJECT": str(gateway_project(tmp_path)),
           "CLIENT_TOKEN_FILE": str(token_file), "DOOR_PORT": str(port)}
    up = compose(name, "compose.gateway.yaml", env, "up", "--detach")
    try:
        assert up.returncode == 0, up.stderr
        url = f"http://127.0.0.1:{port}"
        until = time.monotonic() + 90
        while time.monotonic() < until:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            logs = compose(name, "compose.gateway.yaml", env, "logs")
            raise AssertionError(f"the door never answered: {logs.stdout[-3000:]}")
        yield url, token
    finally:
        compose(name, "compose.gateway.yaml", env, "down", "--volumes", "--timeout", "20")


async def test_the_compose_gateway_serves_a2a_sdk_on_the_hosts_loopback(
        gateway: tuple[str, str]) -> None:
    url, token = gateway
    async with httpx.AsyncClient(timeout=30.0,
                                 headers={"Authorization": f"Bearer {token}"}) as http:
        client = await ClientFactory(ClientConfig(streaming=False, httpx_client=http)
                                     ).create_from_url(url)
        request = SendMessageRequest(message=Message(
            message_id=uuid.uuid4().hex, role=Role.ROLE_USER,
            parts=[Part(text="hello through the door")]))
        events = [event async for event in client.send_message(request)]
        await client.close()
    (event,) = events
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED, event
    assert "hello through the door" in event.task.artifacts[0].parts[0].text
    # without the credential the door refuses, and the agent's own port is not published
    assert httpx.post(url + "/", json={}, timeout=5).status_code == 401


@pytest.mark.parametrize("file", ["compose.formation.yaml", "compose.gateway.yaml"])
def test_each_compose_file_is_valid(engine: None, file: str, tmp_path: Path) -> None:
    _, token_file = secret_file(tmp_path)
    checked = compose("murmurcheck", file, {"CLIENT_TOKEN_FILE": str(token_file),
                                            "MURMUR_PROJECT": str(tmp_path),
                                            "GATEWAY_PROJECT": str(tmp_path)}, "config")
    assert checked.returncode == 0, checked.stderr
    assert "8080" in checked.stdout


FRONT_AGENT = """
async def run(task):
    answer = await (await task.call_member("back", task.text))
    return f"front heard: {answer}"
"""
BACK_AGENT = """
async def run(task):
    return f"back did: {task.text}"
"""


def formation_project(tmp_path: Path) -> Path:
    """front (entry, a declared bearer read from FORMATION_CLIENT_TOKEN) calls back."""
    project = tmp_path / "formation-project"
    project.mkdir()
    specs = {
        "front": ("network:\n  authentication:\n    bearer:\n"
                  "      - {name: client, env: FORMATION_CLIENT_TOKEN, "
                  "scopes: [SendMessage, GetTask]}\n"
                  "capabilities:\n  network: {allow: [localhost]}\n", FRONT_AGENT),
        "back": ("exports:\n  peer_tasks: {accept: true}\n"
                 "network:\n  authentication: {}\n", BACK_AGENT),
    }
    for name, (extra, agent) in specs.items():
        source = tmp_path / "src" / name
        source.mkdir(parents=True)
        (source / "agent.py").write_text(agent)
        (source / "murmur.yaml").write_text(
            f"manifest_version: 1\nname: {name}\nversion: 1.0.0\n"
            "agent:\n  python: agent:run\n" + extra)
        install(pack(source, tmp_path / f"{name}.mur.zip").path, project)
    (project / "roster.yaml").write_text(
        "roster_version: 1\nmembers:\n"
        "  - {name: front, capsule: local/front, version: 1.0.0, entry: true}\n"
        "  - {name: back, capsule: local/back, version: 1.0.0}\n"
        "reachability:\n  - from: front\n    to: [back]\n")
    for path in [tmp_path, project, *project.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    return project


def test_the_compose_formation_serves_its_entry_door_with_the_secret_credential(
        image: str, tmp_path: Path) -> None:
    token, token_file = secret_file(tmp_path)
    port = free_port()
    name = f"murmurfm{secrets.token_hex(3)}"
    env = {"MURMUR_IMAGE": image, "MURMUR_PROJECT": str(formation_project(tmp_path)),
           "CLIENT_TOKEN_FILE": str(token_file), "DOOR_PORT": str(port)}
    up = compose(name, "compose.formation.yaml", env, "up", "--detach")
    try:
        assert up.returncode == 0, up.stderr
        url = f"http://127.0.0.1:{port}/"
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "go"}]}}}
        headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
        until, answer = time.monotonic() + 90, None
        while time.monotonic() < until:
            try:
                answer = httpx.post(url, json=body, headers=headers, timeout=30)
                if answer.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        assert answer is not None and answer.status_code == 200, \
            compose(name, "compose.formation.yaml", env, "logs").stdout[-3000:]
        task = answer.json()["result"]["task"]
        assert task["artifacts"][0]["parts"][0]["text"] == "front heard: back did: go"
        assert httpx.post(url, json=body, timeout=10).status_code == 401
    finally:
        compose(name, "compose.formation.yaml", env, "down", "--volumes", "--timeout", "30")
