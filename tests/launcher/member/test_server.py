"""The door's server under floods (launcher/member/server.py, http_limits.py,
log_limits.py): real uvicorn on 127.0.0.1:0 and real sockets; each test named after the
attack it survives. Bounds are shortened through DoorLimits; every loop is bounded in
count and time. Two tests run the server in a child process with a lowered descriptor
limit, so this process's own limit is never touched."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import resource
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import DoorSettings, build_door
from gateway.door.tasks import TaskRun
from launcher.member.http_limits import DoorLimits, accept_batch, connection_cap
from launcher.member.log_limits import ACCEPT_ERROR, RateLimit
from launcher.member.server import DoorServer
from tests.support.door import card_info

ROOT = Path(__file__).resolve().parents[3]
HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"


# --- helpers ---------------------------------------------------------------------------


class Probe:
    """A small ASGI app: /healthz, /wait (answers once ``release`` is set), POST /echo
    (the body's length, read whole); it records each disconnect it is told of."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.disconnects = 0
        self.waiting = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b"ok"
        if scope["path"] == "/wait":
            self.waiting += 1
            await self.release.wait()
        elif scope["path"] == "/echo":
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    self.disconnects += 1
                    return
                size += len(message.get("body", b""))
                if not message.get("more_body"):
                    break
            body = str(size).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serving(app: Any, limits: DoorLimits | None = None) -> AsyncIterator[
        tuple[DoorServer, int]]:
    """A DoorServer for ``app`` on a pre-bound 127.0.0.1 socket, as the session starts
    it; yields the server and its port, and stops it (bounded) at the end."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = DoorServer.for_app(app, stop_seconds=1, limits=limits)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.005)
        yield server, int(sock.getsockname()[1])
    finally:
        server.stop()
        await asyncio.wait_for(task, 10)
        sock.close()


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the server sent before it closed the connection; fails past ``seconds``."""
    try:
        return await asyncio.wait_for(reader.read(), seconds)
    except (ConnectionResetError, BrokenPipeError):
        return b""


async def trickled_until_cut(reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> bool:
    """Send 10 bytes every 0.1 s (5 s at most, less than a 1000-byte body needs) until
    the server closes the connection; True when it did."""
    cut = False
    for _ in range(50):
        try:
            writer.write(b"x" * 10)
            await writer.drain()
            if await asyncio.wait_for(reader.read(1), 0.1) == b"":
                cut = True
                break
        except TimeoutError:
            continue
        except ConnectionError:
            cut = True
            break
    writer.close()
    return cut


async def healthz(port: int, seconds: float = 3.0) -> int:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=seconds) as c:
        return (await c.get("/healthz")).status_code


@pytest.fixture
def server_log() -> Iterator[list[logging.LogRecord]]:
    """The records "uvicorn.error" and "asyncio" let through their filters (a handler on
    each logger itself, so no other test's logging set-up can hide them)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.WARNING)
    loggers = [logging.getLogger("uvicorn.error"), logging.getLogger("asyncio")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def lines(records: list[logging.LogRecord], text: str) -> list[str]:
    return [m for m in (r.getMessage() for r in records) if text in m]


async def agent(run: TaskRun) -> str:
    return "ok"


def locked_door() -> Any:
    """A real door that accepts no credential at all: every call is refused 401."""
    return build_door(agent, DoorSettings(card=card_info()),
                      policy=AuthPolicy(authenticated=True)).app


# --- the head's size -------------------------------------------------------------------


async def test_one_mebibyte_header_without_a_credential_is_refused_and_the_door_answers_next(
) -> None:
    async with serving(locked_door()) as (server, port):
        reader, writer = await connect(port)
        writer.write(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * (1 << 20))
        with contextlib.suppress(ConnectionError):
            await asyncio.wait_for(writer.drain(), 5)
        answer = await closed_within(reader, 5)
        writer.close()
        # A 431, or the connection closed (a reset can overtake the 431): never served.
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert await healthz(port) == 200
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            refused = await client.post("/", json={"jsonrpc": "2.0", "id": 1,
                                                   "method": "GetTask", "params": {}})
        assert refused.status_code == 401
        assert server.book.open <= 1


async def test_many_small_headers_past_the_head_bound_get_431() -> None:
    async with serving(Probe(), DoorLimits(head_bytes=4096)) as (_, port):
        reader, writer = await connect(port)
        writer.write(HEAD + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 20) for i in range(200)))
        answer = await closed_within(reader, 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer
        assert b"connection: close" in answer


async def test_head_just_under_the_bound_is_served() -> None:
    async with serving(Probe(), DoorLimits(head_bytes=4096)) as (_, port):
        reader, writer = await connect(port)
        pad = 4096 - len(HEAD) - len(b"X-Pad: \r\nConnection: close\r\n\r\n")
        writer.write(HEAD + b"X-Pad: " + b"p" * pad + b"\r\nConnection: close\r\n\r\n")
        answer = await closed_within(reader, 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


async def test_large_body_read_with_its_head_is_not_taken_for_a_large_head() -> None:
    # The head is small; the one read that brings it also brings 200 KiB of body.
    body = b"b" * (200 * 1024)
    async with serving(Probe(), DoorLimits(head_bytes=1024)) as (_, port):
        reader, writer = await connect(port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        answer = await closed_within(reader, 5)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert answer.endswith(b"\r\n\r\n%d" % len(body))


async def test_giant_head_after_an_upgrade_request_is_still_bounded() -> None:
    async with serving(Probe(), DoorLimits(head_bytes=4096)) as (_, port):
        reader, writer = await connect(port)
        writer.write(HEAD + b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\nok"), 5)
        assert first.startswith(b"HTTP/1.1 200 ")
        writer.write(HEAD + b"X-Pad: " + b"a" * (256 * 1024))
        with contextlib.suppress(ConnectionError):
            await asyncio.wait_for(writer.drain(), 5)
        answer = await closed_within(reader, 5)
        writer.close()
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:200]


async def test_pipelined_requests_under_the_head_bound_are_all_served() -> None:
    async with serving(Probe(), DoorLimits(head_bytes=1024)) as (_, port):
        reader, writer = await connect(port)
        writer.write(HEAD + b"\r\n" + HEAD + b"\r\n" + HEAD + b"Connection: close\r\n\r\n")
        answer = await closed_within(reader, 5)
        writer.close()
        assert answer.count(b"HTTP/1.1 200 ") == 3, answer


# --- head and body deadlines -----------------------------------------------------------


async def test_half_sent_head_is_closed_after_the_head_timeout() -> None:
    async with serving(Probe(), DoorLimits(head_seconds=0.4)) as (server, port):
        reader, writer = await connect(port)
        writer.write(HEAD)  # no blank line: the head never ends
        began = time.monotonic()
        assert await closed_within(reader, 5) == b""
        waited = time.monotonic() - began
        writer.close()
        assert 0.3 <= waited < 3.0, waited
        assert server.book.open == 0
        assert await healthz(port) == 200


async def test_connection_that_sends_nothing_is_closed_after_the_head_timeout() -> None:
    async with serving(Probe(), DoorLimits(head_seconds=0.4)) as (_, port):
        reader, writer = await connect(port)
        began = time.monotonic()
        assert await closed_within(reader, 5) == b""
        writer.close()
        assert 0.3 <= time.monotonic() - began < 3.0


async def test_head_trickled_a_byte_at_a_time_is_closed_after_the_head_timeout() -> None:
    # Each byte would restart uvicorn's keep-alive timer; the head deadline does not move.
    async with serving(Probe(), DoorLimits(head_seconds=0.4)) as (_, port):
        reader, writer = await connect(port)
        began = time.monotonic()
        closed = False
        for byte in HEAD + b"X-Slow: " + b"s" * 200:
            try:
                writer.write(bytes([byte]))
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    if await asyncio.wait_for(reader.read(1), 0.02) == b"":
                        closed = True
                        break
            except ConnectionError:  # a reset (data still in flight when it closed) is a cut
                closed = True
                break
            if time.monotonic() - began > 5:
                break
        writer.close()
        assert closed and time.monotonic() - began < 3.0


async def test_body_trickled_past_the_body_timeout_is_cut() -> None:
    probe = Probe()
    async with serving(probe, DoorLimits(body_seconds=0.5)) as (_, port):
        reader, writer = await connect(port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
        began = time.monotonic()
        assert await trickled_until_cut(reader, writer)
        assert time.monotonic() - began < 3.0
        async with asyncio.timeout(2):
            while probe.disconnects == 0:
                await asyncio.sleep(0.01)


async def test_body_nobody_reads_trickled_after_the_answer_is_closed_in_the_head_timeout(
) -> None:
    # /healthz answers without reading the body: the connection then waits for a head,
    # and a body still trickling in does not hold it open.
    async with serving(Probe(), DoorLimits(head_seconds=0.4)) as (_, port):
        reader, writer = await connect(port)
        writer.write(b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Length: 100000\r\n\r\n")
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\nok"), 5)).startswith(
            b"HTTP/1.1 200 ")
        began = time.monotonic()
        assert await trickled_until_cut(reader, writer)
        assert time.monotonic() - began < 3.0


async def test_keep_alive_caller_pausing_between_requests_is_not_cut() -> None:
    # The head deadline runs from the last answer, not from the connection's start.
    async with serving(Probe(), DoorLimits(head_seconds=0.4)) as (server, port):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            began = time.monotonic()
            for _ in range(8):
                assert (await client.get("/healthz")).status_code == 200
                assert server.book.open == 1
                await asyncio.sleep(0.15)
            assert time.monotonic() - began > 0.8  # twice the head deadline, one connection


# --- the connection cap ----------------------------------------------------------------


async def test_thirty_idle_sockets_at_a_cap_of_twenty_leave_room_for_a_new_caller() -> None:
    async with serving(Probe(), DoorLimits(connections=20)) as (server, port):
        idle = [await connect(port) for _ in range(30)]
        for _, writer in idle:
            writer.write(b"GET / HTTP/1.1\r\n")  # half a head each, then nothing
        await asyncio.sleep(0.2)
        began = time.monotonic()
        assert await healthz(port) == 200
        assert time.monotonic() - began < 3.0
        assert server.book.open <= 20
        closed = 0
        for reader, writer in idle:
            with contextlib.suppress(TimeoutError):
                if await asyncio.wait_for(reader.read(), 0.05) == b"":
                    closed += 1
            writer.close()
        assert closed >= 11  # the ten over the cap, and one more for the new caller


async def test_at_the_cap_with_every_connection_busy_the_newcomer_is_closed() -> None:
    probe = Probe()
    async with serving(probe, DoorLimits(connections=3)) as (server, port):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as c:
            busy = [asyncio.create_task(c.get("/wait")) for _ in range(3)]
            async with asyncio.timeout(3):
                while probe.waiting < 3:
                    await asyncio.sleep(0.01)
            reader, writer = await connect(port)
            assert await closed_within(reader, 3) == b""
            writer.close()
            probe.release.set()
            assert [r.status_code for r in await asyncio.gather(*busy)] == [200, 200, 200]
        assert await healthz(port) == 200
        assert server.book.open <= 1


async def test_a_burst_of_callers_does_not_wait_out_dropped_connections() -> None:
    # asyncio accepts only a quarter of the cap at one wake-up (8 here); the kernel's
    # queue stays long, so a burst faster than that is queued, not dropped for a second.
    import socket

    def burst(port: int) -> float:
        began = time.monotonic()
        sockets = [socket.create_connection(("127.0.0.1", port), timeout=5)
                   for _ in range(100)]
        took = time.monotonic() - began
        for sock in sockets:
            sock.close()
        return took

    async with serving(Probe(), DoorLimits(connections=32)) as (server, port):
        assert server.config.backlog == 8
        took = await asyncio.get_running_loop().run_in_executor(None, burst, port)
        assert took < 0.9, took  # a dropped SYN is sent again after 1 s
        assert await healthz(port) == 200


def test_the_connection_cap_is_half_the_soft_descriptor_limit() -> None:
    assert connection_cap(512, 1024) == 512
    assert connection_cap(512, 200) == 100
    assert connection_cap(512, 1) == 1
    assert connection_cap(512, resource.RLIM_INFINITY) == 512
    assert DoorLimits().connections == 512


def test_one_wake_up_accepts_at_most_a_quarter_of_the_cap() -> None:
    # asyncio accepts up to the listen backlog at one wake-up before any is counted.
    assert accept_batch(512) == 128
    assert accept_batch(20) == 8
    server = DoorServer.for_app(Probe(), stop_seconds=1, limits=DoorLimits(connections=40))
    assert server.config.backlog == accept_batch(server.book.cap) == 10


def test_limits_that_cannot_hold_are_refused() -> None:
    for bad in ({"head_bytes": 0}, {"connections": 0}, {"head_seconds": 0},
                {"body_seconds": -1}, {"log_seconds": 0}, {"log_lines": -1}):
        with pytest.raises(ValueError):
            DoorLimits(**bad)


# --- the server's own log --------------------------------------------------------------


async def test_five_hundred_garbage_requests_log_a_handful_of_lines(
        server_log: list[logging.LogRecord]) -> None:
    async with serving(Probe()) as (_, port):

        async def garbage(count: int) -> None:
            for _ in range(count):
                reader, writer = await connect(port)
                writer.write(b"\x16\x03\x01 NOT HTTP AT ALL\r\n\r\n")
                assert (await closed_within(reader, 5)).startswith(b"HTTP/1.1 400 ")
                writer.close()

        await asyncio.wait_for(asyncio.gather(*(garbage(50) for _ in range(10))), 60)
    invalid = lines(server_log, "Invalid HTTP request received.")
    assert len(invalid) == 6, invalid  # five lines, then the count at the server's end
    assert invalid[-1] == ("495 more lines like 'Invalid HTTP request received.' were "
                           "not logged in 60 s.")
    assert len(server_log) == 6


async def test_websocket_upgrade_requests_never_log_the_pip_hint(
        server_log: list[logging.LogRecord]) -> None:
    async with serving(Probe(), DoorLimits(log_lines=3)) as (_, port):
        for _ in range(40):
            reader, writer = await connect(port)
            writer.write(HEAD + b"Connection: Upgrade\r\nUpgrade: websocket\r\n"
                         b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                         b"Sec-WebSocket-Version: 13\r\n\r\n")
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            writer.close()
    assert not lines(server_log, "pip")
    assert not lines(server_log, "WebSocket library")
    assert len(lines(server_log, "Unsupported upgrade request.")) == 4  # 3, then the count
    assert len(server_log) <= 4


def test_a_flood_of_one_line_is_held_to_a_few_per_window_then_counted() -> None:
    logger = logging.getLogger("murmur.test.rate")
    now = [0.0]
    limit = RateLimit(logger, lines=2, seconds=10, clock=lambda: now[0])
    kept: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            kept.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    logger.addFilter(limit)
    logger.propagate = False
    try:
        for _ in range(100):
            logger.warning("Invalid HTTP request received.")
        logger.warning("Unsupported upgrade request.")  # another kind has its own window
        limit.flush()  # the window has not ended: nothing to say yet
        assert kept == ["Invalid HTTP request received."] * 2 + ["Unsupported upgrade request."]
        now[0] = 10.0
        limit.flush()
        assert kept[3:] == ["98 more lines like 'Invalid HTTP request received.' were not "
                            "logged in 10 s."]
        logger.warning("Invalid HTTP request received.")  # a new window lets it through
        assert kept[-1] == "Invalid HTTP request received."
    finally:
        logger.removeFilter(limit)
        logger.removeHandler(handler)
        logger.propagate = True


async def test_accept_errors_reported_by_the_loop_are_logged_once_per_window(
        server_log: list[logging.LogRecord]) -> None:
    async with serving(Probe()):
        loop = asyncio.get_running_loop()
        for _ in range(2048):  # what one failed accept event logs on Python 3.11
            loop.call_exception_handler({"message": ACCEPT_ERROR,
                                         "exception": OSError(24, "Too many open files")})
        loop.call_exception_handler({"message": "Task exception was never retrieved"})
    accept = lines(server_log, ACCEPT_ERROR)
    assert accept[0].startswith(ACCEPT_ERROR)
    assert accept[1:] == [f"2047 more lines like {ACCEPT_ERROR!r} were not logged in 60 s."]
    assert lines(server_log, "Task exception was never retrieved")  # other lines pass


# --- in a child process, with a lowered descriptor limit -------------------------------

CHILD = textwrap.dedent("""
    import asyncio, logging, resource, socket, sys
    from launcher.member.http_limits import DoorLimits
    from launcher.member.server import DoorServer

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main(soft, cap_first):
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if not cap_first:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        server = DoorServer.for_app(app, stop_seconds=1, limits=DoorLimits(head_seconds=30))
        if cap_first:  # the cap was chosen under a higher limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        print("PORT", sock.getsockname()[1], "CAP", server.book.cap, flush=True)
        await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(
            None, sys.stdin.readline), 30)
        server.stop()
        await task

    asyncio.run(main(int(sys.argv[1]), sys.argv[2] == "cap-first"))
""")


@contextlib.contextmanager
def child_door(soft: int, order: str) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(soft), order], cwd=ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        words = child.stdout.readline().split()
        assert words[:1] == ["PORT"], words
        yield child, int(words[1]), int(words[3])
    finally:
        if child.poll() is None:
            with contextlib.suppress(OSError):
                child.communicate("stop\n", timeout=15)
        if child.poll() is None:
            child.kill()
            child.wait(5)


async def open_idle(port: int, count: int) -> list[asyncio.StreamWriter]:
    writers = []
    for _ in range(count):
        _, writer = await connect(port)
        writers.append(writer)
    return writers


async def test_more_idle_sockets_than_descriptors_leave_the_door_reachable() -> None:
    with child_door(64, "limit-first") as (child, port, cap):
        assert cap == 32
        writers = await open_idle(port, 100)  # more than the child has descriptors
        await asyncio.sleep(0.5)
        began = time.monotonic()
        assert await healthz(port, seconds=5) == 200
        assert time.monotonic() - began < 3.0
        for writer in writers:
            writer.close()
        _, errors = child.communicate("stop\n", timeout=15)
    assert ACCEPT_ERROR not in errors, errors[-2000:]


async def test_accept_errors_past_the_descriptor_limit_are_logged_once_per_window() -> None:
    with child_door(64, "cap-first") as (child, port, cap):
        assert cap == 512  # chosen before the limit was lowered: accepts will fail
        writers = await open_idle(port, 120)
        await asyncio.sleep(2.5)  # asyncio retries the accepts each second
        for writer in writers:
            writer.close()
        _, errors = child.communicate("stop\n", timeout=15)
    accept = [line for line in errors.splitlines() if "socket.accept()" in line]
    assert len(accept) == 2, errors[-3000:]  # one line, then the count
    assert accept[0].endswith(ACCEPT_ERROR)
    assert accept[1].endswith(f"more lines like {ACCEPT_ERROR!r} were not logged in 60 s.")
    held = re.search(r"(\d+) more lines like", accept[1])
    assert held is not None and int(held.group(1)) >= 1, accept[1]


# --- the target's authority (DNS rebinding) ----------------------------------------------


def public_door() -> Any:
    """A real public door: DoorAuth's only check is the Host (421)."""
    return build_door(agent, DoorSettings(card=card_info())).app


async def raw_status(port: int, head: bytes) -> bytes:
    reader, writer = await connect(port)
    writer.write(head)
    answer = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    return answer


async def test_an_absolute_form_target_naming_another_host_is_refused_421_behind_a_loopback_host(
) -> None:
    """DNS rebinding through the request line: the Host says loopback, the target names
    the attacker's host, which HTTP says the server must use."""
    async with serving(public_door()) as (_, port):
        forged = await raw_status(port, (
            b"GET http://rebound.example:%d/.well-known/agent-card.json HTTP/1.1\r\n"
            b"Host: 127.0.0.1:%d\r\n\r\n") % (port, port))
        assert forged.startswith(b"HTTP/1.1 421 "), forged
        honest = await raw_status(port, (
            b"GET http://127.0.0.1:%d/.well-known/agent-card.json HTTP/1.1\r\n"
            b"Host: rebound.example\r\n\r\n") % (port,))
        assert honest.startswith(b"HTTP/1.1 200 "), honest  # the target's authority rules
        ipv6 = await raw_status(port, (
            b"GET http://[::1]:%d/healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n")
            % (port, port))
        assert ipv6.startswith(b"HTTP/1.1 200 "), ipv6


async def test_a_host_whose_port_is_not_a_number_is_refused_421() -> None:
    async with serving(public_door()) as (_, port):
        for host in (b"127.0.0.1:abc", b"localhost:%d0x" % port, b"[::1]:-1"):
            answer = await raw_status(port, b"GET /.well-known/agent-card.json HTTP/1.1\r\n"
                                            b"Host: " + host + b"\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 421 "), (host, answer)
