"""One credential holding streams cannot starve a real member's door (docs/limits.md,
"Streams"): a declared bearer with ``SubscribeToTask`` opens as many streams as the door
lets it, on its own slow tasks, on a real ``mur run --capsule`` process; the operator is
still answered at once, on a new connection each time."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.door.streams import PER_OWNER, PER_TASK
from tests.support import member as support
from tests.support.member import Member, Project

pytestmark = pytest.mark.integration

TOKEN = "declared-ci-token-for-the-stream-test-0123"
AUTHENTICATION = ("{bearer: [{name: ci, env: CI_DOOR_TOKEN, "
                  "scopes: [SendMessage, GetTask, SubscribeToTask]}]}")


@pytest.fixture
def project(tmp_path: Path, murmur_home: Path) -> Iterator[Project]:
    yield from support.project_fixture(tmp_path, murmur_home)


def open_stream(member: Member, task_id: str) -> tuple[socket.socket, bytes]:
    """A raw SubscribeToTask stream held open by its socket; what the door sent first."""
    port = int(member.door.rsplit(":", 1)[1])
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                       "params": {"id": task_id}}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
                 b"A2A-Version: 1.0\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % (port, TOKEN.encode(), len(body)) + body)
    first = b""
    while b"\r\n\r\n" not in first or (b"event-stream" in first and b"data:" not in first) or (
            b"application/" in first and not first.rstrip().endswith(b"}")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        first += chunk
    return sock, first


def test_a_credential_holding_every_stream_it_can_leaves_the_operator_served(
        project: Project) -> None:
    project.capsule("holder", authentication=AUTHENTICATION,
                    lifecycle="concurrency: 4\nqueue_depth: 0")
    member = project.run("holder", env={"CI_DOOR_TOKEN": TOKEN})
    ci = {"Authorization": f"Bearer {TOKEN}", "A2A-Version": "1.0"}
    held: list[socket.socket] = []
    try:
        with httpx.Client(base_url=member.door, timeout=10.0) as client:
            tasks = []
            for n in range(3):
                sent = client.post("/", headers=ci, json={
                    "jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {
                        "message": {"messageId": f"m{n}", "role": "ROLE_USER",
                                    "parts": [{"text": "sleep 60"}]},
                        "configuration": {"returnImmediately": True}}}).json()
                tasks.append(sent["result"]["task"]["id"])
            answers = []
            for attempt in range(PER_OWNER + 16):  # bounded: past every bound it has
                sock, first = open_stream(member, tasks[attempt % len(tasks)])
                held.append(sock)
                answers.append(first)
            served = [first for first in answers if b"text/event-stream" in first]
            refused = [first for first in answers if b"TOO_MANY_STREAMS" in first]
            assert len(served) == min(PER_OWNER, PER_TASK * len(tasks))
            assert len(served) + len(refused) == len(answers)
            # the operator, on fresh connections, is answered at once
            operator = {"Authorization": f"Bearer {member.token}", "A2A-Version": "1.0"}
            with httpx.Client(base_url=member.door, timeout=5.0) as fresh:
                got = fresh.post("/", headers=operator, json={
                    "jsonrpc": "2.0", "id": 1, "method": "GetTask",
                    "params": {"id": tasks[0]}}).json()
                assert got["result"]["status"]["state"] == "TASK_STATE_WORKING"
                sent = fresh.post("/", headers=operator, json={
                    "jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {
                        "message": {"messageId": "op", "role": "ROLE_USER",
                                    "parts": [{"text": "hello"}]}}}).json()
                assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
                rest = fresh.get(f"/tasks/{tasks[0]}:subscribe", headers=ci)
                assert rest.status_code == 429 and rest.headers["retry-after"] == "1"
    finally:
        for sock in held:
            sock.close()
