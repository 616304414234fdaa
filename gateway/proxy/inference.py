"""A model member's endpoint as the runtime's egress sees it: the key is attached here and
the counts are kept here, on the trusted side (docs/llm.md, "The key" and "Counts").

The agent process holds no endpoint key and no authoritative count: a tool that kills it
or reads its memory finds neither. Every request to the member's ``inference.base_url``
origin passes :class:`InferenceEgress`, which, in order:

1. refuses it, with the code the driver would give, when the key's variable is unset
   (``E-RUN-057``), when it names no task the member holds, or past a bound: the member's
   ``limits.tokens`` (``E-RUN-066``, also written to the trace), the task's
   ``inference.budget.tokens`` (``E-RUN-063``) or its ``inference.max_turns`` requests
   (``E-RUN-062``); nothing is sent then;
2. removes every header of the key's name the agent set, attaches the key (``Authorization:
   Bearer <key>``, or the bare key under the header ``inference.api_key_header`` names),
   asks for an unencoded answer (the meter must read it) and sends it on its own pool;
3. hands the answer back through :class:`_Meter`, which reads the usage as it passes
   (the last ``usage`` of a stream's ``data:`` lines, or of a whole JSON body), adds it to
   the task's and the member's counts as soon as it is seen, counts by bytes (4 to a
   token, request and answer) when the answer has none, and replaces the key with
   ``[key]`` should the endpoint echo it. What it keeps to parse is bounded.

The counts live as long as the member runtime: an agent process that dies and is started
again meets the same counts. The key leaves this module only in the header of a request
to the endpoint; no repr, log line or refusal carries it.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

from gateway.proxy.egress import default_port
from gateway.proxy.proxy_errors import EgressRefused, ModelBoundReached

__all__ = ["BYTES_PER_TOKEN", "InferenceBounds", "InferenceEgress"]

#: Counting an answer without usage: one token for every this many bytes sent and read.
BYTES_PER_TOKEN: Final = 4
#: Tasks whose counts are kept (the oldest forgotten first; a member holds far fewer).
_TASKS_KEPT: Final = 4096
#: The longest ``data:`` line, and the largest whole body, the meter parses.
_PARSE_LIMIT: Final = 1024 * 1024

#: Told of a bound reached: ``(task_id, limit, value, spent)``, for the trace.
LimitHook = Callable[[str | None, str, int, int], None]


@dataclass(frozen=True, slots=True)
class InferenceBounds:
    """What the egress counts against (``None``: unbounded)."""

    #: ``limits.tokens`` of a version 2 roster: every task of the member together.
    member_tokens: int | None = None
    #: ``inference.budget.tokens``: one task.
    task_tokens: int | None = None
    #: ``inference.max_turns``: requests one task makes.
    task_requests: int | None = None


@dataclass(slots=True)
class _Count:
    tokens: int = 0
    requests: int = 0


@dataclass(slots=True)
class _Counts:
    member: int = 0
    tasks: OrderedDict[str, _Count] = field(default_factory=OrderedDict)

    def task(self, task_id: str) -> _Count:
        count = self.tasks.get(task_id)
        if count is None:
            count = self.tasks[task_id] = _Count()
            if len(self.tasks) > _TASKS_KEPT:
                self.tasks.popitem(last=False)
        return count


class InferenceEgress:
    """The endpoint of one model member (see the module docstring).

    ``base_url`` is the endpoint as the member reads it (its ``${VAR}`` read already);
    ``key`` the value of ``api_key_env`` (``None``: no key is attached; ``""``: the
    variable is unset, every request refused with ``E-RUN-057``); ``on_limit`` writes the
    ``limit_reached`` record of the member's tokens.
    """

    __slots__ = ("_bounds", "_counts", "_header", "_host", "_inner", "_key", "_key_bytes",
                 "_on_limit", "_origin", "_variable")

    def __init__(self, base_url: str, *, key: str | None, variable: str | None,
                 header: str = "authorization", bounds: InferenceBounds = InferenceBounds(),
                 on_limit: LimitHook | None = None,
                 inner: httpx.AsyncBaseTransport | None = None) -> None:
        url = httpx.URL(base_url)
        self._origin = _origin(url)
        self._host = url.host
        self._key = key
        self._key_bytes = key.encode() if key else b""
        self._variable = variable
        self._header = header.lower()
        self._bounds = bounds
        self._on_limit = on_limit
        self._counts = _Counts()
        self._inner = inner

    def __repr__(self) -> str:  # never the key
        return f"InferenceEgress({self._host!r})"

    @property
    def origin(self) -> tuple[str, str, int | None]:
        """``(scheme, host, port)`` of the endpoint (a tunnel to it is refused)."""
        return self._origin

    def matches(self, url: httpx.URL) -> bool:
        return _origin(url) == self._origin

    def spent(self, task_id: str | None = None) -> int:
        """Tokens counted: the member's, or one task's."""
        if task_id is None:
            return self._counts.member
        count = self._counts.tasks.get(task_id)
        return 0 if count is None else count.tokens

    async def send(self, request: httpx.Request, task_id: str | None) -> httpx.Response:
        """Steps 1-3 of the module docstring."""
        count = self._admit(task_id)
        count.requests += 1
        _with_key(request, self._header, self._key)
        sent = int(request.headers.get("content-length", "0") or 0)
        response = await self._pool().handle_async_request(request)
        streamed = "text/event-stream" in response.headers.get("content-type", "")
        meter = _Meter(self, count, response.stream, sent, streamed)
        headers = [(name, value) for name, value in response.headers.raw
                   if name.lower() != b"content-length"]   # the key's mask may change it
        return httpx.Response(response.status_code, headers=headers, stream=meter,
                              extensions=response.extensions, request=request)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()

    # --- 1. the bounds -------------------------------------------------------------------

    def _admit(self, task_id: str | None) -> _Count:
        if self._key == "":
            raise ModelBoundReached("E-RUN-057", "inference.api_key_env",
                                    f"the variable {self._variable} is not set",
                                    variable=self._variable, host=self._host)
        if task_id is None:
            raise EgressRefused(f"requests to the model endpoint {self._host} are the "
                                "member's driver's, made for a task it holds")
        bounds, counts = self._bounds, self._counts
        if bounds.member_tokens is not None and counts.member >= bounds.member_tokens:
            if self._on_limit is not None:
                self._on_limit(task_id, "member.tokens", bounds.member_tokens, counts.member)
            raise ModelBoundReached("E-RUN-066", "limits.tokens",
                                    "the member spent its limits.tokens",
                                    spent=counts.member, limit=bounds.member_tokens)
        count = counts.task(task_id)
        if bounds.task_tokens is not None and count.tokens >= bounds.task_tokens:
            raise ModelBoundReached("E-RUN-063", "inference.budget.tokens",
                                    "the task spent its inference.budget.tokens",
                                    spent=count.tokens, budget=bounds.task_tokens)
        if bounds.task_requests is not None and count.requests >= bounds.task_requests:
            raise ModelBoundReached("E-RUN-062", "inference.max_turns",
                                    "the task made its inference.max_turns requests",
                                    turns=count.requests)
        return count

    def _add(self, count: _Count, tokens: int) -> None:
        count.tokens += tokens
        self._counts.member += tokens

    def _pool(self) -> httpx.AsyncBaseTransport:
        if self._inner is None:
            # Its own pool, TLS verified as httpx does (SSL_CERT_FILE honoured): the agent
            # no longer speaks TLS to the endpoint, this egress does.
            self._inner = httpx.AsyncHTTPTransport(
                verify=httpx.create_ssl_context(trust_env=True))
        return self._inner

    def _mask(self, data: bytes) -> bytes:
        return data.replace(self._key_bytes, b"[key]") if self._key_bytes else data


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host.rstrip(".").lower(),
            url.port if url.port is not None else default_port(url.scheme))


def _with_key(request: httpx.Request, header: str, key: str | None) -> None:
    """Step 2: the agent's own header of that name goes whatever it held."""
    raw = [(name, value) for name, value in request.headers.raw
           if name.lower() not in (header.encode(), b"accept-encoding")]
    raw.append((b"Accept-Encoding", b"identity"))
    if key:
        value = f"Bearer {key}" if header == "authorization" else key
        name = b"Authorization" if header == "authorization" else header.encode("ascii")
        raw.append((name, value.encode("latin-1")))
    request.headers = httpx.Headers(raw)


# --- 3. the answer ---------------------------------------------------------------------------


class _Meter(httpx.AsyncByteStream):
    """The answer as it passes: usage read, the key masked (see the module docstring)."""

    def __init__(self, egress: InferenceEgress, count: _Count,
                 inner: httpx.SyncByteStream | httpx.AsyncByteStream, sent: int,
                 streamed: bool) -> None:
        self._egress = egress
        self._count = count
        self._inner = inner
        self._bytes = sent
        self._counted = 0            # tokens added from usage so far
        self._usage_seen = False
        self._line = bytearray()
        self._whole = bytearray()
        self._stream = streamed      # server-sent events, else one body
        self._held = b""             # the tail that may begin an echoed key
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._inner, httpx.AsyncByteStream)
        keep = max(len(self._egress._key_bytes) - 1, 0)
        async for chunk in self._inner:
            self._read(chunk)
            data = self._egress._mask(self._held + chunk)
            cut = max(len(data) - keep, 0)
            # Held back: bytes that may be the start of the key, until the next chunk.
            self._held, data = data[cut:], data[:cut]
            if data:
                yield data
        self._end_of_body()
        if self._held:
            yield self._held
            self._held = b""

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._end_of_answer()
            if isinstance(self._inner, httpx.AsyncByteStream):
                await self._inner.aclose()

    def _read(self, chunk: bytes) -> None:
        self._bytes += len(chunk)
        if not self._stream:
            if len(self._whole) + len(chunk) <= _PARSE_LIMIT:
                self._whole += chunk
            return
        if b"\n" not in chunk:      # most of a long line: added to, never copied whole
            if len(self._line) + len(chunk) <= _PARSE_LIMIT:
                self._line += chunk
            else:
                self._line.clear()     # past the bound: that line is not read
            return
        lines = (bytes(self._line) + chunk).split(b"\n")
        self._line = bytearray(lines.pop()[:_PARSE_LIMIT])
        for line in lines:
            if line.startswith(b"data:"):
                self._usage(line[5:])

    def _end_of_body(self) -> None:
        if self._stream:
            if self._line.startswith(b"data:"):
                self._usage(bytes(self._line[5:]))
        elif self._whole:
            self._usage(bytes(self._whole))

    def _end_of_answer(self) -> None:
        """No usage seen: count by bytes (request and answer)."""
        if not self._usage_seen:
            self._egress._add(self._count, -(-self._bytes // BYTES_PER_TOKEN))

    def _usage(self, data: bytes) -> None:
        """The answer's ``usage`` (a stream may repeat it, growing): what it adds since the
        last one is counted at once, before the answer's end reaches the agent."""
        data = data.strip()
        if not data.startswith(b"{") or b"usage" not in data:
            return
        try:
            usage: Any = json.loads(data).get("usage")
        except (ValueError, AttributeError):
            return
        if not isinstance(usage, dict):
            return
        tokens = _int(usage.get("prompt_tokens")) + _int(usage.get("completion_tokens"))
        self._usage_seen = True
        if tokens > self._counted:
            self._egress._add(self._count, tokens - self._counted)
            self._counted = tokens


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else 0
