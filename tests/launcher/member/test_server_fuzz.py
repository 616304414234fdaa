"""Fuzzing the door's HTTP surface with raw bytes (issue 10): a real authenticated door on
a DoorServer at 127.0.0.1:0, in a thread of its own, and hypothesis writing whole
requests: request lines, header blocks with hostile bytes (CR, LF, NUL, non-ASCII, huge
values, duplicate or conflicting framing headers), and bodies (JSON with surrogates,
deep nesting, huge numbers, or noise). The property for every request: an answer whose
status is below 500, or a closed connection; and the next ordinary request is served.
Bounded: 150 examples, each connection read for at most 5 s."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.auth.credentials import OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import DoorSettings, build_door
from gateway.door.tasks import TaskRun
from launcher.member.http_limits import DoorLimits
from launcher.member.server import DoorServer
from tests.support.door import card_info

STATUS_LINE = re.compile(rb"^HTTP/1\.[01] ([0-9]{3})")
#: The door's operator token, known to the strategies so that hostile requests also get
#: past DoorAuth to the A2A layer; ``@HOST@`` becomes the door's own Host value.
OPERATOR = OperatorToken("fuzz-operator-token-0123456789abcdefghijklmnop")
HOST = b"@HOST@"


async def _agent(run: TaskRun) -> str:
    return "ok"


class ThreadedDoor:
    """The door on its own event loop in a daemon thread, so a blocking client in the
    test can never be held up by the server's loop (or hold it up)."""

    def __init__(self) -> None:
        self.operator = OPERATOR
        door = build_door(_agent, DoorSettings(card=card_info()),
                          policy=AuthPolicy(authenticated=True, operator=self.operator))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        door.set_url(f"http://127.0.0.1:{self.port}")
        self.server = DoorServer.for_app(
            door.app, stop_seconds=1,
            limits=DoorLimits(head_seconds=2.0, body_seconds=2.0))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))

    def start(self) -> None:
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                return
            threading.Event().wait(0.01)
        raise RuntimeError("the door did not start")

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.stop)
        self.thread.join(10)
        self.sock.close()


@pytest.fixture(scope="module")
def door() -> Iterator[ThreadedDoor]:
    served = ThreadedDoor()
    served.start()
    yield served
    served.stop()


def exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw``, close our sending side, and read until the server closes (5 s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        try:
            client.sendall(raw)
            client.shutdown(socket.SHUT_WR)
        except OSError:        # the server may close first (a 431 mid-send)
            pass
        answer = b""
        try:
            while chunk := client.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return answer


def get_task(door: ThreadedDoor) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks",
                       "params": {}}).encode()
    return exchange(door.port, b"POST / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                    b"Authorization: Bearer %s\r\nA2A-Version: 1.0\r\n"
                    b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                    b"Connection: close\r\n\r\n%s"
                    % (door.port, door.operator.value.encode(), len(body), body))


_TOKEN_BYTES = st.binary(min_size=1, max_size=12).filter(lambda b: b"\r" not in b)
_METHODS = st.sampled_from([b"GET", b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS",
                            b"PRI", b"CONNECT", b"G\x00T", b""]) | _TOKEN_BYTES
_PATHS = st.sampled_from([b"/", b"//", b"/healthz", b"/.well-known/agent-card.json",
                          b"/resources/files/../../etc/passwd", b"/%00", b"*",
                          b"http://evil.example/", b"/\xff\xfe", b"/" + b"a" * 70_000])
_VERSIONS = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1x", b""])
_HEADER_NAMES = st.sampled_from([
    b"Host", b"Content-Length", b"Transfer-Encoding", b"Authorization", b"A2A-Version",
    b"Content-Type", b"Connection", b"Upgrade", b"Expect", b"X-Murmur-Task-Trust",
    b"x_murmur_task_trust", b"Bad Name", b"", b"\xc3\xa9"])
_HEADER_VALUES = st.sampled_from([
    HOST, HOST, b"Bearer " + OPERATOR.value.encode(), b"Bearer " + OPERATOR.value.encode(),
    b"127.0.0.1", b"evil.example", b"0", b"-1", b"99999999999999999999", b"chunked",
    b"chunked, chunked", b"gzip", b"Bearer mft1.x.y", b"Bearer " + b"A" * 9000,
    b"application/json", b"text/plain", b"1.0", b"0.3", b"websocket", b"100-continue",
    b"a\x00b", b"\xff", b"x" * 70_000]) | st.binary(max_size=40)
_BODIES = st.sampled_from([
    b"", b"{}", b"[]", b'{"jsonrpc":"2.0","id":"\\ud800","method":"ListTasks"}',
    b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":'
    b'"ROLE_USER","messageId":"m","parts":[{"text":"\\udfff"}]}}}',
    b"[" * 5000 + b"]" * 5000, b'{"a":1e999999}', b"NaN", b"0\r\n\r\n",
    b"5\r\nhello\r\n0\r\n\r\n"]) | st.binary(max_size=300)


@st.composite
def raw_requests(draw: Any) -> bytes:
    line = draw(_METHODS) + b" " + draw(_PATHS) + b" " + draw(_VERSIONS)
    headers = draw(st.lists(st.tuples(_HEADER_NAMES, _HEADER_VALUES), max_size=6))
    head = line + b"\r\n" + b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    ending = draw(st.sampled_from([b"\r\n", b"", b"\n", b"\r\n\r\n"]))
    return head + ending + draw(_BODIES)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=raw_requests())
def test_raw_hostile_requests_never_get_a_5xx_and_the_next_request_is_served(
        door: ThreadedDoor, raw: bytes) -> None:
    answer = exchange(door.port, raw.replace(HOST, b"127.0.0.1:%d" % door.port))
    if answer:
        status = STATUS_LINE.match(answer)
        assert status is not None, answer[:200]
        assert int(status.group(1)) < 500, answer[:300]
    served = get_task(door)
    assert served.startswith(b"HTTP/1.1 200 "), served[:300]
    assert b'"tasks"' in served
