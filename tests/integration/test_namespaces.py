"""More than one host on one machine: two network namespaces the test makes itself,
joined by a veth pair whose addresses exist only inside them (docs/door-beyond-loopback.md).

``agent-host`` runs an a2a-sdk agent on its namespace address; ``door-host`` runs a
gateway member (``agent.a2a.url``) in front of it, its door published with ``--listen``
on its own namespace address; a2a-sdk's client in ``agent-host`` calls that door with a
declared bearer credential, across the veth pair. The member's loopback door is not
reachable from the other namespace. Skips, with the reason, where namespaces cannot be
made (not root, no ``ip``)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import third_party
from tests.support.member import install_capsule, member_env, read_ready

pytestmark = pytest.mark.integration

SUBNET = "10.213.{n}."


@dataclass
class Namespaces:
    agent_ns: str
    door_ns: str
    agent_ip: str
    door_ip: str

    def run(self, ns: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", ns, *argv]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@pytest.fixture
def namespaces() -> Iterator[Namespaces]:
    if os.geteuid() != 0:
        pytest.skip("making network namespaces needs root")
    if shutil.which("ip") is None:
        pytest.skip("the `ip` command (iproute2) is missing")
    tag = secrets.token_hex(3)
    agent_ns, door_ns = f"murA{tag}", f"murD{tag}"
    veth_a, veth_d = f"va{tag}", f"vd{tag}"
    base = SUBNET.format(n=int(tag[:2], 16) % 250 + 1)
    made: list[str] = []
    try:
        for ns in (agent_ns, door_ns):
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_d)
        _ip("link", "set", veth_a, "netns", agent_ns)
        _ip("link", "set", veth_d, "netns", door_ns)
        for ns, dev, address in ((agent_ns, veth_a, base + "1"), (door_ns, veth_d, base + "2")):
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except OSError as exc:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False)
        pytest.skip(f"network namespaces cannot be made here: {exc}")
    try:
        yield Namespaces(agent_ns, door_ns, base + "1", base + "2")
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False)


CLIENT = textwrap.dedent('''
    import asyncio, sys, uuid
    import httpx
    from a2a.client import ClientConfig, ClientFactory
    from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest

    async def main(url, token, text):
        async with httpx.AsyncClient(timeout=20.0,
                                     headers={"Authorization": f"Bearer {token}"}) as http:
            client = await ClientFactory(ClientConfig(streaming=False, httpx_client=http)
                                         ).create_from_url(url)
            request = SendMessageRequest(message=Message(
                message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)]))
            async for event in client.send_message(request):
                print(event.task.status.state, event.task.artifacts[0].parts[0].text)
            await client.close()

    asyncio.run(main(*sys.argv[1:]))
''')


def wait_for_port(ns: Namespaces, where: str, host: str, port: int) -> None:
    probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=1).close()"
    until = time.monotonic() + 30
    while time.monotonic() < until:
        if subprocess.run(ns.run(where, sys.executable, "-c", probe),
                          capture_output=True, check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {host}:{port} in {where}")


def test_a_gateway_door_in_one_namespace_serves_a_client_in_another(
        namespaces: Namespaces, tmp_path: Path, murmur_home: Path) -> None:
    agent_port, door_port = 18001, 18002
    agent = subprocess.Popen(
        namespaces.run(namespaces.agent_ns, sys.executable, str(third_party.SDK_AGENT),
                       "--host", namespaces.agent_ip, "--port", str(agent_port),
                       "--name", "faraway"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    member = None
    try:
        wait_for_port(namespaces, namespaces.door_ns, namespaces.agent_ip, agent_port)
        source = tmp_path / "src" / "relay"
        source.mkdir(parents=True)
        (source / "murmur.yaml").write_text(
            "manifest_version: 1\nname: relay\nversion: 1.0.0\n"
            f"agent:\n  a2a:\n    url: http://{namespaces.agent_ip}:{agent_port}\n"
            "network:\n  authentication:\n    bearer:\n"
            "      - {name: client, env: RELAY_TOKEN, scopes: [SendMessage, GetTask]}\n")
        project = tmp_path / "project"
        project.mkdir()
        install_capsule(project, source)
        token = secrets.token_urlsafe(24)
        env = member_env(murmur_home, RELAY_TOKEN=token)
        process = subprocess.Popen(
            namespaces.run(namespaces.door_ns, sys.executable, "-m", "launcher.cli", "run",
                           "--capsule", "local/relay", "--capsule-version", "1.0.0",
                           "--project", str(project), "--json",
                           "--listen", f"{namespaces.door_ip}:{door_port}"),
            cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        member = read_ready(process, timeout=60)
        url = f"http://{namespaces.door_ip}:{door_port}"
        assert member.ready["public_url"] == url
        called = subprocess.run(
            namespaces.run(namespaces.agent_ns, sys.executable, "-c", CLIENT, url, token,
                           "hello across hosts"),
            capture_output=True, text=True, timeout=60, check=False)
        assert called.returncode == 0, called.stderr
        state, _, text = called.stdout.strip().partition(" ")
        assert state == "3"  # TASK_STATE_COMPLETED
        assert "hello across hosts" in text
        # The loopback door is the door host's alone.
        loopback_port = int(member.door.rsplit(":", 1)[1])
        probe = subprocess.run(
            namespaces.run(namespaces.agent_ns, sys.executable, "-c",
                           "import socket; socket.create_connection(('127.0.0.1', "
                           f"{loopback_port}), timeout=2)"),
            capture_output=True, check=False)
        assert probe.returncode != 0
    finally:
        if member is not None:
            member.kill()
        agent.kill()
        agent.wait(timeout=10)
