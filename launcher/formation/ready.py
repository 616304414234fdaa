"""Readiness of a formation's members (docs/launcher.md, "Readiness").

A member reports on stdout with one ``--json`` readiness line (docs/member-runtime.md)::

    {"event":"ready","session_id","pid","door_url","capsule","version","records_dir",
     "formation_id","member"}

and is ready when the door at ``door_url`` serves an agent card whose
``urn:murmur:session:v1`` extension names that ``session_id``. The door is probed every
100 ms with the session's operator token (``operator.token`` in ``records_dir``).

Every way a member can fail to come up is a :class:`NotReady` whose text completes the
sentence "member `<name>` did not become ready: ..." of ``E-RUN-045``. A wait cut short
by the formation's ``--deadline`` rather than by the 180 seconds is
:class:`DeadlineFell` instead (``E-RUN-053``).

Nothing a member printed is ever echoed into a message: its first line could hold
anything, a credential included.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.protocol import CARD_PATH, SESSION_EXTENSION_URI

# gateway.protocol, not gateway.a2a.models: the A2A models would cost every launch a tenth of
# a second before the first member starts.
from launcher.errors import LauncherError
from launcher.home.paths import records_root
from launcher.home.records import OPERATOR_TOKEN_FILE, read_operator_token
from launcher.ids import is_formation_id, is_session_id
from launcher.spawn.env_names import READY_SECONDS_ENV
from launcher.spawn.process import LineTooLong, ManagedProcess, read_line

#: How long each member has from its own start to become ready.
READY_SECONDS = 180.0
#: How often a reported door is probed.
PROBE_INTERVAL = 0.1
#: The longest one probe may take.
PROBE_TIMEOUT = 1.0
#: The largest answer a probe reads (a card is a few kilobytes).
PROBE_MAX_BYTES = 1 << 20

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class NotReady(LauncherError):
    """A member did not come up; ``problem`` says how, for ``E-RUN-045``."""

    def __init__(self, member: str, problem: str) -> None:
        super().__init__(f"member `{member}` did not become ready: {problem}")
        self.member = member
        self.problem = problem


class DeadlineFell(LauncherError):
    """The formation's ``--deadline`` fell while a member was still coming up."""

    def __init__(self, member: str) -> None:
        super().__init__(f"the deadline fell while member `{member}` was coming up")
        self.member = member


@dataclass(frozen=True)
class Ready:
    """What a member's readiness line reported, checked."""

    member: str
    session_id: str
    pid: int
    door_url: str
    records_dir: Path
    formation_id: str | None
    #: Where the door is published beyond loopback (``--listen``), when it is.
    public_url: str | None = None
    #: The door's gRPC binding (``127.0.0.1:<port>``), when it serves one, and where it
    #: is published beyond loopback (``--listen``), when it is.
    grpc_url: str | None = None
    public_grpc_url: str | None = None

    @property
    def operator_token_path(self) -> Path:
        return self.records_dir / OPERATOR_TOKEN_FILE


def ready_seconds(environ: Mapping[str, str]) -> float:
    """The readiness bound: 180 s, or the test-only override when it is set."""
    value = environ.get(READY_SECONDS_ENV)
    if value:
        try:
            seconds = float(value)
        except ValueError:
            return READY_SECONDS
        if 0 < seconds <= READY_SECONDS:
            return seconds
    return READY_SECONDS


def loopback_door(url: object) -> bool:
    """True for ``http://<loopback>:<port>`` (a door as the runtime serves it)."""
    if not isinstance(url, str) or len(url) > 2048:
        return False
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return (parts.scheme == "http" and parts.hostname in _LOOPBACK_HOSTS
            and port is not None and not parts.username and not parts.password)


def _under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def _address(value: object) -> str | None:
    """A ``host:port`` a member reported, or None (nothing else is passed on)."""
    if not isinstance(value, str) or len(value) > 300:
        return None
    try:
        port = urlsplit(f"http://{value}").port
    except ValueError:
        return None
    return value if port is not None and "/" not in value and "@" not in value else None


def parse_ready_line(line: bytes, *, member: str, formation_id: str | None) -> Ready:
    """Check one readiness line of ``member``; :class:`NotReady` when it is not one.

    ``formation_id`` None means the member was launched in no formation (never the case
    for the launcher, kept for symmetry): then no formation may be reported either.
    """
    try:
        data: Any = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None
    if not isinstance(data, dict) or data.get("event") != "ready":
        raise NotReady(member, "its first line on stdout is not a readiness line (a JSON "
                               'object with "event":"ready")')
    if not loopback_door(data.get("door_url")):
        raise NotReady(member, "its readiness line reports no door (an http URL on "
                               "127.0.0.1 with a port)")
    reported = data.get("formation_id")
    if reported != formation_id:
        shown = reported if is_formation_id(reported) else (
            "none" if reported is None else "something that is not a formation id")
        raise NotReady(member, f"it reported formation {shown}, not {formation_id}, the one "
                               "it was launched with")
    if data.get("member") != member:
        raise NotReady(member, "its readiness line names another member than the one it "
                               "was launched as")
    session_id = data.get("session_id")
    if not isinstance(session_id, str) or not is_session_id(session_id):
        raise NotReady(member, "its readiness line reports no session id")
    pid = data.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise NotReady(member, "its readiness line reports no pid")
    records_dir = data.get("records_dir")
    root = records_root()
    if (not isinstance(records_dir, str) or not os.path.isabs(records_dir)
            or not _under(Path(os.path.normpath(records_dir)), root)):
        raise NotReady(member, f"its readiness line reports no records directory under {root}")
    public_url = data.get("public_url")
    grpc_url = data.get("grpc_url")
    return Ready(member=member, session_id=session_id, pid=pid, door_url=data["door_url"],
                 records_dir=Path(os.path.normpath(records_dir)), formation_id=reported,
                 public_url=public_url if isinstance(public_url, str)
                 and public_url.startswith(("http://", "https://")) else None,
                 grpc_url=grpc_url if loopback_door(f"http://{grpc_url}") else None,
                 public_grpc_url=_address(data.get("public_grpc_url")))


def card_names_session(card: object, session_id: str) -> bool:
    """True when an agent card's session extension names ``session_id``."""
    if not isinstance(card, dict):
        return False
    capabilities = card.get("capabilities")
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    if not isinstance(extensions, list):
        return False
    for extension in extensions:
        if isinstance(extension, dict) and extension.get("uri") == SESSION_EXTENSION_URI:
            params = extension.get("params")
            if isinstance(params, dict) and params.get("sessionId") == session_id:
                return True
    return False


async def probe_card(client: DoorProbe, ready: Ready, token: str,
                     timeout: float) -> dict[str, Any] | None:
    """The card the door serves its operator, when it names the session; else None."""
    card = await client.card(ready.door_url, token, max(0.05, min(PROBE_TIMEOUT, timeout)))
    return card if card is not None and card_names_session(card, ready.session_id) else None


def _exited(process: ManagedProcess) -> int | None:
    return process.returncode


def describe_exit(code: int) -> str:
    """``status 3`` or ``signal 9``, as a member's end is shown."""
    return f"signal {-code}" if code < 0 else f"status {code}"


async def wait_for_door(client: DoorProbe, process: ManagedProcess, ready: Ready,
                        *, until: float, deadline_bound: bool) -> dict[str, Any]:
    """Probe ``ready``'s door every 100 ms until it answers as its session; the card it
    answered with.

    ``until`` is a time on the running loop's clock; ``deadline_bound`` says whether it is
    the formation's deadline (:class:`DeadlineFell`) or the 180 seconds (:class:`NotReady`).
    """
    loop = asyncio.get_running_loop()
    token: str | None = None
    while True:
        code = _exited(process)
        if code is not None:
            raise NotReady(ready.member, f"it exited with {describe_exit(code)} after it "
                                         "reported, before its door answered")
        if token is None:
            try:
                token = read_operator_token(ready.operator_token_path) or None
            except (OSError, UnicodeDecodeError):
                token = None
        remaining = until - loop.time()
        if token is not None and remaining > 0:
            card = await probe_card(client, ready, token, remaining)
            if card is not None:
                return card
        remaining = until - loop.time()
        if remaining <= 0:
            if deadline_bound:
                raise DeadlineFell(ready.member)
            what = ("answer" if token is not None
                    else f"answer (its records directory holds no {OPERATOR_TOKEN_FILE})")
            raise NotReady(ready.member, f"its door at {ready.door_url} did not {what} as "
                                         f"session {ready.session_id} in time")
        await asyncio.sleep(min(PROBE_INTERVAL, remaining))


async def read_ready_line(process: ManagedProcess, reader: asyncio.StreamReader, *,
                          member: str, formation_id: str, until: float,
                          deadline_bound: bool, limit_seconds: float) -> Ready:
    """Read and check the member's first stdout line before ``until``."""
    loop = asyncio.get_running_loop()
    try:
        line = await read_line(reader, max(0.0, until - loop.time()))
    except TimeoutError:
        if deadline_bound:
            raise DeadlineFell(member) from None
        raise NotReady(member, f"it did not report within {limit_seconds:g} seconds of its "
                               "start") from None
    except LineTooLong:
        raise NotReady(member, "its first line on stdout is not a readiness line (it is "
                               "too long)") from None
    if line is None:
        try:
            code = await asyncio.wait_for(process.wait_async(),
                                          max(0.1, until - loop.time()))
        except TimeoutError:
            raise NotReady(member, "it closed its stdout before it reported") from None
        raise NotReady(member, f"it exited with {describe_exit(code)} before it reported")
    return parse_ready_line(line, member=member, formation_id=formation_id)


class DoorProbe:
    """The readiness probe's one request: ``GET <door>/.well-known/agent-card.json`` with
    the operator token, plain HTTP/1.1 on a connection of its own (``Connection:
    close``), the answer read whole up to :data:`PROBE_MAX_BYTES`.

    Written here rather than taken from an HTTP client: a probe only ever speaks plain
    HTTP to a loopback door (:func:`parse_ready_line` takes no other URL), follows no
    redirect and uses no proxy, so the operator token never leaves the reported door;
    and importing httpx cost every launch about 0.2 s of the launcher's CPU while its
    members were starting (measured with ``python -X importtime``)."""

    async def card(self, door_url: str, token: str, timeout: float) -> dict[str, Any] | None:
        """The door's card as JSON, or None for anything else (no answer in time, a
        status other than 200, a body that is not a JSON object)."""
        url = urlsplit(door_url)
        path = url.path.rstrip("/") + CARD_PATH
        request = (f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                   f"Authorization: Bearer {token}\r\nAccept: application/json\r\n"
                   "Connection: close\r\n\r\n").encode("latin-1")
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(url.hostname, url.port)
                try:
                    writer.write(request)
                    answer = await _read_to_end(reader)
                finally:
                    writer.close()
        except (OSError, TimeoutError, UnicodeError, ValueError):
            return None
        try:
            return _card_of(answer) if answer is not None else None
        except ValueError:  # a length or chunk size that is no number: no card yet
            return None

    async def aclose(self) -> None:
        """Nothing is kept between probes (each has its own connection)."""

    async def __aenter__(self) -> DoorProbe:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def _read_to_end(reader: asyncio.StreamReader) -> bytes | None:
    data = b""
    while chunk := await reader.read(65536):
        data += chunk
        if len(data) > PROBE_MAX_BYTES:
            return None
    return data


def _card_of(answer: bytes) -> dict[str, Any] | None:
    """The JSON object of a 200 answer (its body by ``Content-Length``, chunked, or to
    the end), else None."""
    head, separator, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = lines[0].split(b" ", 2)
    if not separator or len(status) < 2 or status[1] != b"200":
        return None
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    if headers.get(b"transfer-encoding") == b"chunked":
        body = _unchunked(body)
    elif b"content-length" in headers:
        body = body[:int(headers[b"content-length"])]
    try:
        card = json.loads(body)
    except ValueError:
        return None
    return card if isinstance(card, dict) else None


def _unchunked(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, body = out + rest[:size], rest[size + 2:]
    return out


def new_probe_client() -> DoorProbe:
    """The probe the launcher's readiness checks share."""
    return DoorProbe()
