"""A door beyond loopback (docs/door-beyond-loopback.md): ``mur run --capsule --listen`` and
``mur run --roster --publish``, plain and with TLS, called with a2a-sdk's client at an
address other than 127.0.0.1 (127.0.0.2: still this host's loopback, so nothing is
exposed), with the same credentials and Host check; and every bad input refused before
anything starts, naming the flag."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
import uuid
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2_grpc
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.formation import (
    kill_group_quietly,
    launcher_env,
    read_formation_line,
    simple_project,
    start_launcher,
)
from tests.support.member import Project, codes, project_fixture

pytestmark = pytest.mark.integration

project = pytest.fixture(project_fixture)
PUBLIC = "127.0.0.2"


def free_port(host: str = PUBLIC) -> int:
    """A port free on ``host`` with the next one free too (the door's gRPC binding)."""
    for _ in range(50):
        with socket.socket() as sock, socket.socket() as after:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            try:
                after.bind((host, port + 1))
            except OSError:
                continue
            return port
    raise AssertionError(f"no two free ports in a row on {host}")


async def ask_over_grpc(address: str, token: str, text: str,
                        credentials: grpc.ChannelCredentials | None = None) -> str:
    """A SendMessage over the door's published gRPC binding, as the operator."""
    channel = (grpc.aio.secure_channel(address, credentials) if credentials is not None
               else grpc.aio.insecure_channel(address))
    async with channel:
        answer = await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(
            send(text), metadata=[("a2a-version", "1.0"),
                                  ("authorization", f"Bearer {token}")], timeout=20)
    assert answer.task.status.state == TaskState.TASK_STATE_COMPLETED, answer
    return str(answer.task.artifacts[0].parts[0].text)


def self_signed(folder: Path, address: str) -> tuple[Path, Path]:
    """A certificate for ``address`` (an IP SAN) and its key, PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "murmur test door")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "door.crt", folder / "door.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def send(text: str) -> SendMessageRequest:
    return SendMessageRequest(message=Message(message_id=uuid.uuid4().hex,
                                              role=Role.ROLE_USER, parts=[Part(text=text)]))


async def ask_with_sdk(url: str, token: str, text: str, verify: Any = True) -> str:
    """a2a-sdk's client, from the card at ``url``, as the operator."""
    async with httpx.AsyncClient(timeout=20.0, verify=verify,
                                 headers={"Authorization": f"Bearer {token}"}) as http:
        client = await ClientFactory(ClientConfig(streaming=False, httpx_client=http)
                                     ).create_from_url(url)
        try:
            events = [event async for event in client.send_message(send(text))]
        finally:
            await client.close()
    (event,) = events
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED, event
    return str(event.task.artifacts[0].parts[0].text)


def echo(project: Project) -> None:
    project.capsule("echo")


async def test_listen_serves_the_same_door_at_another_address(project: Project) -> None:
    echo(project)
    port = free_port()
    member = project.run("echo", "--listen", f"{PUBLIC}:{port}")
    url = f"http://{PUBLIC}:{port}"
    assert member.ready["public_url"] == url
    assert member.ready["door_url"].startswith("http://127.0.0.1:")
    assert member.ready["public_grpc_url"] == f"{PUBLIC}:{port + 1}"
    assert await ask_with_sdk(url, member.token, "hello") == "echo: hello"
    assert await ask_over_grpc(f"{PUBLIC}:{port + 1}", member.token, "hi") == "echo: hi"
    async with httpx.AsyncClient() as http:
        card = (await http.get(url + "/.well-known/agent-card.json",
                               headers={"Authorization": f"Bearer {member.token}"})).json()
        assert {i["url"]: i["protocolBinding"] for i in card["supportedInterfaces"]} == {
            url: "HTTP+JSON", f"{PUBLIC}:{port + 1}": "GRPC"}, \
            "gRPC is published on the next port, and the listener's card names it there"
        loopback = (await http.get(member.door + "/.well-known/agent-card.json",
                                   headers={"Authorization": f"Bearer {member.token}"})).json()
        assert {i["url"]: i["protocolBinding"] for i in loopback["supportedInterfaces"]} == {
            member.door: "HTTP+JSON", member.ready["grpc_url"]: "GRPC"}
        # the same DoorAuth: no credential, 401; a Host it was not given, 421
        assert (await http.get(url + "/.well-known/agent-card.json")).status_code == 401
        rebound = await http.get(url + "/.well-known/agent-card.json", headers={
            "Authorization": f"Bearer {member.token}", "Host": f"evil.example:{port}"})
        assert rebound.status_code == 421


async def test_public_host_names_are_accepted_and_named_on_the_card(
        project: Project) -> None:
    echo(project)
    port = free_port()
    member = project.run("echo", "--listen", f"{PUBLIC}:{port}", "--public-host",
                         "Door.Example.")
    assert member.ready["public_url"] == f"http://door.example:{port}"
    async with httpx.AsyncClient() as http:
        for host in (f"door.example:{port}", "door.example"):
            answer = await http.get(f"http://{PUBLIC}:{port}/.well-known/agent-card.json",
                                    headers={"Authorization": f"Bearer {member.token}",
                                             "Host": host})
            assert answer.status_code == 200, host
            # the card names the address the client used
            assert answer.json()["supportedInterfaces"][0]["url"] == f"http://{host}"
        refused = await http.get(f"http://{PUBLIC}:{port}/.well-known/agent-card.json",
                                 headers={"Authorization": f"Bearer {member.token}",
                                          "Host": f"other.example:{port}"})
        assert refused.status_code == 421  # only the names given


async def test_listen_with_tls(project: Project, tmp_path: Path) -> None:
    echo(project)
    cert, key = self_signed(tmp_path, PUBLIC)
    port = free_port()
    member = project.run("echo", "--listen", f"{PUBLIC}:{port}", "--tls-cert", str(cert),
                         "--tls-key", str(key))
    url = f"https://{PUBLIC}:{port}"
    assert member.ready["public_url"] == url
    trusted = ssl.create_default_context(cafile=str(cert))
    assert await ask_with_sdk(url, member.token, "secret", verify=trusted) == "echo: secret"
    assert await ask_over_grpc(f"{PUBLIC}:{port + 1}", member.token, "sealed",
                               grpc.ssl_channel_credentials(cert.read_bytes())) == "echo: sealed"
    with pytest.raises(grpc.aio.AioRpcError):   # plain gRPC gets nowhere on it either
        await ask_over_grpc(f"{PUBLIC}:{port + 1}", member.token, "plain")
    with pytest.raises(httpx.HTTPError):  # plain HTTP gets nowhere on the TLS listener
        httpx.get(f"http://{PUBLIC}:{port}/healthz", timeout=5)
    assert httpx.get(member.door + "/healthz").status_code == 200  # loopback stays plain


@pytest.mark.parametrize(("flags", "message"), [
    (["--listen", "nowhere"], "--listen 'nowhere' is not HOST:PORT"),
    (["--listen", "bad_name!:80"], "is not a host name or an IP address"),
    (["--listen", f"{PUBLIC}:70000"], "70000 is not a port"),
    (["--listen", f"{PUBLIC}:0", "--tls-cert", "x.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-key", "k.pem"], "--tls-key is taken with --listen HOST:PORT only"),
    (["--publish", f"{PUBLIC}:0"], "--publish is taken with --roster"),
])
def test_bad_listener_flags_are_usage_errors(project: Project, flags: list[str],
                                              message: str) -> None:
    echo(project)
    process = project.start("echo", "--task", "x", *flags)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert message in err.decode()


def test_the_next_port_in_use_is_e_run_056_for_the_grpc_binding(project: Project) -> None:
    echo(project)
    port = free_port()
    with socket.socket() as taken:
        taken.bind((PUBLIC, port + 1))
        taken.listen(1)
        process = project.start("echo", "--task", "x", "--listen", f"{PUBLIC}:{port}")
        _, err = process.communicate(timeout=30)
    text = err.decode()
    assert process.returncode == 1
    assert codes(text) == ["E-RUN-056"]
    assert f"--listen {PUBLIC}:{port}: the next port, {port + 1}, where the door publishes " \
        "its gRPC binding, cannot be bound" in text
    assert "choose a port whose next port is free too" in text


def test_a_port_in_use_is_e_run_056_naming_the_flag(project: Project) -> None:
    echo(project)
    with socket.socket() as taken:
        taken.bind((PUBLIC, 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        process = project.start("echo", "--task", "x", "--listen", f"{PUBLIC}:{port}")
        _, err = process.communicate(timeout=30)
    text = err.decode()
    assert process.returncode == 1
    assert codes(text) == ["E-RUN-056"]
    assert f"--listen {PUBLIC}:{port}: it cannot be bound (Address already in use)" in text
    assert "choose another port" in text


def test_an_unreadable_certificate_is_e_run_056_naming_it(project: Project,
                                                          tmp_path: Path) -> None:
    echo(project)
    missing = tmp_path / "nope.pem"
    process = project.start("echo", "--task", "x", "--listen", f"{PUBLIC}:{free_port()}",
                            "--tls-cert", str(missing), "--tls-key", str(missing))
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1
    assert codes(err.decode()) == ["E-RUN-056"]
    assert f"--tls-cert {missing} / {missing}: the certificate and key cannot be used" in \
        err.decode()


async def test_publish_serves_the_entry_members_door_and_only_it(tmp_path: Path,
                                                                 murmur_home: Path) -> None:
    project_dir = simple_project(tmp_path, ["front", "back"], entry="front",
                                 reachability={"front": ["back"]})
    port = free_port()
    process = start_launcher(project_dir, "--json", "--publish", f"{PUBLIC}:{port}",
                             env=launcher_env(MURMUR_HOME=str(murmur_home)))
    try:
        line = read_formation_line(process, timeout=90)
        entry = next(m for m in line["members"] if m["entry"])
        # the published address is on the formation line and in the running record
        assert line["public_url"] == entry["public_url"] == f"http://{PUBLIC}:{port}"
        assert "public_url" not in next(m for m in line["members"] if not m["entry"])
        launcher_record = json.loads(
            (murmur_home / "running" / f"{line['formation_id']}.json").read_text())
        assert launcher_record["public_url"] == f"http://{PUBLIC}:{port}"
        records = Path(next(p for p in (murmur_home / "records").rglob(entry["session_id"])))
        token = (records / "operator.token").read_text()
        assert await ask_with_sdk(f"http://{PUBLIC}:{port}", token, "hi") == "front: hi"
        assert line["public_grpc_url"] == entry["public_grpc_url"] == f"{PUBLIC}:{port + 1}"
        assert await ask_over_grpc(f"{PUBLIC}:{port + 1}", token, "yo") == "front: yo"
        listening = {(member["name"], _listens_on(member["pid"], port))
                     for member in line["members"]}
        assert listening == {("front", True), ("back", False)}
    finally:
        kill_group_quietly(process)
        process.wait(timeout=30)


def test_publish_refuses_a_port_in_use_before_any_member_starts(
        tmp_path: Path, murmur_home: Path) -> None:
    project_dir = simple_project(tmp_path, ["front"], entry="front")
    with socket.socket() as taken:
        taken.bind((PUBLIC, 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        process = start_launcher(project_dir, "--publish", f"{PUBLIC}:{port}", "--task", "x",
                                 env=launcher_env(MURMUR_HOME=str(murmur_home)))
        out, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert codes(err.decode()) == ["E-RUN-056"]
    assert out == b""
    assert not (murmur_home / "records").exists() or not any(
        (murmur_home / "records").rglob("trace.jsonl"))


def _listens_on(pid: int, port: int) -> bool:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(Path(fd).readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes and int(fields[1].split(":")[1], 16) == port:
            return True
    return False
