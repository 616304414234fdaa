"""One request to an OpenAI-compatible chat-completions endpoint, and what can go wrong.

In order: :class:`ModelError` (a task's failure with its ``E-RUN`` code), reading the
endpoint's address (:func:`endpoint_url`), the answer as read (:class:`ToolRequest`,
:class:`Completion`), then :class:`ChatEndpoint`, whose :meth:`~ChatEndpoint.complete`
sends one request to the member's forward proxy in absolute form (the runtime's egress
attaches the key and counts: ``gateway.proxy.inference``) and

1. retries a ``429`` or ``5xx`` from the endpoint with backoff (``Retry-After`` when the
   endpoint gives one), at most :data:`ATTEMPTS` times and never past the deadline;
2. reads a streamed answer (``text/event-stream``: each text delta handed to
   ``on_text`` as it comes, tool calls put together from their fragments, the usage of
   the last chunk) or a whole one (``application/json``), within the endpoint's bounds:
   ``inference.max_answer_bytes``, ``inference.timeout`` for the whole answer,
   ``inference.idle_timeout`` for a stream gone silent (each past its bound a code that
   names it);
3. maps every failure to its code at this one boundary: the egress's refusals with the
   code it gives (a spent bound, an unset key), the key refused (401/403, naming the
   variable), the host outside the grant or unreachable (naming the host), any other
   error (naming the status).

This process never holds the key: it is not in its environment, and the egress replaces
it should the endpoint echo it.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from gateway.proxy.formation import DoorUnavailable, EgressRefused
from gateway.redaction import redact
from launcher.admission.model_agent import VARIABLE, expand, url_problem
from launcher.diagnostics import DiagnosticError
from launcher.member.model.settings import ModelSettings

__all__ = ["ATTEMPTS", "ChatEndpoint", "Completion", "ModelError", "ToolRequest",
           "endpoint_url"]

#: Requests made for one answer: the first and its retries.
ATTEMPTS = 5
#: The first wait before a retry; doubled each time, at most :data:`MOST_WAIT`.
FIRST_WAIT = 0.5
MOST_WAIT = 20.0
#: How much of an error answer's body a message quotes.
DETAIL_LIMIT = 300
#: Text deltas of one answer streamed one chunk each; past these, what one read brings.
ONE_BY_ONE = 1024


class ModelError(DiagnosticError):
    """A model member's task cannot go on; ``str()`` is the diagnostic, code first."""


# --- the endpoint's address and key -------------------------------------------------------


def endpoint_url(settings: ModelSettings, environ: Mapping[str, str], member: str) -> str:
    """``inference.base_url``, its ``${VAR}`` read from ``environ``. Raises
    :class:`ModelError` (``E-RUN-065``) for a variable unset (with no default) or not a
    URL."""
    value = expand(settings.base_url, environ)
    if value is None or url_problem(value) is not None:
        found = VARIABLE.fullmatch(settings.base_url)
        raise ModelError("E-RUN-065", "inference.base_url", member=member,
                         variable=found[1] if found else settings.base_url,
                         field="inference.base_url")
    return value.rstrip("/")


# --- the answer -----------------------------------------------------------------------------


@dataclass
class ToolRequest:
    """One tool call the model asked for: ``arguments`` as the model wrote them (JSON)."""

    id: str
    name: str
    arguments: str = ""

    def wire(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments or "{}"}}


@dataclass
class Completion:
    text: str = ""
    tool_requests: list[ToolRequest] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None
    #: Seconds from sending the request to the end of the answer, retries included.
    latency: float = 0.0
    attempts: int = 1

    def assistant_message(self) -> dict[str, Any]:
        """The answer as the next request's history holds it."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_requests:
            message["tool_calls"] = [request.wire() for request in self.tool_requests]
        return message


@dataclass(frozen=True, slots=True)
class _Retry:
    """An answer worth asking again (a ``429`` or ``5xx``)."""

    status: int
    wait: float | None
    detail: str


# --- the endpoint ---------------------------------------------------------------------------


OnText = Callable[[str], Awaitable[None]]


class ChatEndpoint:
    """The endpoint as one task reaches it: ``client`` is the task's ``task.http``."""

    def __init__(self, settings: ModelSettings, client: httpx.AsyncClient, *, member: str,
                 deadline: datetime | None, environ: Mapping[str, str] | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        environ = os.environ if environ is None else environ
        self._settings = settings
        self._client = client
        self._member = member
        self._deadline = deadline
        self._sleep = sleep
        self.url = endpoint_url(settings, environ, member)
        model = expand(settings.model, environ)
        if model is None:
            found = VARIABLE.fullmatch(settings.model)
            raise ModelError("E-RUN-065", "inference.model", member=member,
                             variable=found[1] if found else settings.model,
                             field="inference.model")
        self.model = model
        self.host = urlsplit(self.url).hostname or self.url
        self._check_grant()

    def _check_grant(self) -> None:
        from gateway.proxy.egress import AllowList

        if not AllowList(self._settings.network_allow).allows(httpx.URL(self.url)):
            raise ModelError("E-RUN-058", "inference.base_url", member=self._member,
                             host=self.host)

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                       on_text: OnText | None = None) -> Completion:
        """One answer (step 1 of the module docstring: its retries)."""
        body = self._body(messages, tools)
        started = time.monotonic()
        wait = FIRST_WAIT
        for attempt in range(1, ATTEMPTS + 1):
            completion = await self._once(body, on_text)
            if isinstance(completion, _Retry):
                pause = min(completion.wait if completion.wait is not None else wait,
                            MOST_WAIT)
                if attempt == ATTEMPTS or not self._time_for(pause):
                    raise self._error(completion.status, completion.detail)
                await self._sleep(pause)
                wait = min(wait * 2, MOST_WAIT)
                continue
            completion.latency = time.monotonic() - started
            completion.attempts = attempt
            return completion
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
              ) -> dict[str, Any]:
        settings = self._settings
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True,
                                "stream_options": {"include_usage": True}}
        if tools:
            body["tools"] = tools
        if settings.max_tokens is not None:
            body["max_tokens"] = settings.max_tokens
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        return body

    def _time_for(self, pause: float) -> bool:
        left = self._seconds_left()
        return left is None or left > pause + 1.0

    def _seconds_left(self) -> float | None:
        if self._deadline is None:
            return None
        return (self._deadline - datetime.now(UTC)).total_seconds()

    async def _once(self, body: dict[str, Any], on_text: OnText | None
                    ) -> Completion | _Retry:
        """Step 2; step 3 for what is not retried."""
        headers = {"Accept": "text/event-stream, application/json"}
        left = self._seconds_left()
        whole = self._settings.timeout
        timeout = whole if left is None else max(1.0, min(left, whole))
        try:
            async with asyncio.timeout(timeout), self._client.stream(
                    "POST", f"{self.url}/chat/completions", json=body, headers=headers,
                    timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0))) as response:
                if response.status_code >= 400:
                    refusal = await self._refusal(response)
                    if isinstance(refusal, _Retry):
                        return refusal
                    raise refusal
                chunks = self._bounded(response)
                if "text/event-stream" in response.headers.get("content-type", ""):
                    return await _read_stream(chunks, on_text)
                return _read_whole(b"".join([chunk async for chunk in chunks]))
        except TimeoutError:
            if timeout < whole:      # the task's deadline came first
                raise self._unreachable("no answer in time") from None
            raise ModelError("E-RUN-069", "inference.timeout", member=self._member,
                             host=self.host, seconds=f"{whole:g}") from None
        except EgressRefused:
            raise ModelError("E-RUN-058", "inference.base_url", member=self._member,
                             host=self.host) from None
        except (DoorUnavailable, httpx.TransportError) as exc:
            raise self._unreachable(_reason(exc)) from None
        except ValueError as exc:    # a chat completion that does not read as one
            raise self._error(200, f"an answer that is not a chat completion ({exc})"
                              ) from None

    async def _refusal(self, response: httpx.Response) -> ModelError | _Retry:
        body = (await response.aread())[:4096]
        status = response.status_code
        marker = response.headers.get("proxy-status", "")
        if marker.startswith("murmur") and "upstream_unavailable" in marker:
            return self._unreachable(_error_text(body) or "no connection")
        if marker.startswith("murmur") and "model_refused" in marker:
            return self._egress_refusal(body)
        if status in (401, 403):
            return ModelError("E-RUN-059", "inference.api_key_env", member=self._member,
                              host=self.host, status=status,
                              variable=self._settings.api_key_env or "(no api_key_env)")
        detail = _error_text(body) or response.reason_phrase or "an error"
        if status == 429 or status >= 500:
            return _Retry(status, _retry_after(response), detail)
        return self._error(status, detail)

    def _egress_refusal(self, body: bytes) -> ModelError:
        """The runtime's egress refused the request before sending it: its code (a spent
        bound, an unset key), with the counts it gives."""
        try:
            detail = json.loads(body).get("detail") or {}
            code, key = str(detail["code"]), str(detail["key"])
            fields = {str(name): value for name, value in dict(detail["fields"]).items()
                      if name != "member"}
        except (ValueError, KeyError, TypeError, AttributeError):
            return self._error(403, "the runtime refused the request: " + _error_text(body))
        fields.setdefault("host", self.host)
        fields.setdefault("variable", self._settings.api_key_env or "(no api_key_env)")
        return ModelError(code, key, member=self._member, **fields)

    async def _bounded(self, response: httpx.Response) -> AsyncIterator[bytes]:
        """The answer's bytes, each read within ``inference.idle_timeout`` and all of
        them within ``inference.max_answer_bytes`` (step 2)."""
        settings = self._settings
        chunks = response.aiter_bytes().__aiter__()
        read = 0
        while True:
            try:
                chunk = await asyncio.wait_for(anext(chunks), settings.idle_timeout)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise ModelError("E-RUN-070", "inference.idle_timeout", member=self._member,
                                 host=self.host, seconds=f"{settings.idle_timeout:g}"
                                 ) from None
            read += len(chunk)
            if read > settings.max_answer_bytes:
                raise ModelError("E-RUN-068", "inference.max_answer_bytes",
                                 member=self._member, host=self.host,
                                 limit=settings.max_answer_bytes)
            yield chunk

    def _unreachable(self, reason: str) -> ModelError:
        return ModelError("E-RUN-060", "inference.base_url", member=self._member,
                          host=self.host, reason=_clean(reason))

    def _error(self, status: int, detail: str) -> ModelError:
        return ModelError("E-RUN-061", "inference.base_url", member=self._member,
                          host=self.host, status=status, detail=_clean(detail),
                          url=f"{self.url}/chat/completions")


# --- reading answers ----------------------------------------------------------------------


async def _line_reads(chunks: AsyncIterator[bytes]) -> AsyncIterator[list[str]]:
    """The complete lines each read of a stream brought (``\n``, ``\r\n`` or ``\r``,
    as SSE allows)."""
    rest = ""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    async for chunk in chunks:
        lines = (rest + decoder.decode(chunk)).splitlines(keepends=True)
        rest = lines.pop() if lines and not lines[-1].endswith(("\n", "\r")) else ""
        yield [line.rstrip("\r\n") for line in lines]
    rest += decoder.decode(b"", final=True)
    if rest:
        yield [rest]


async def _read_stream(chunks: AsyncIterator[bytes], on_text: OnText | None) -> Completion:
    completion = Completion()
    # Parts joined once at the end: an endpoint may send its answer in a great many
    # small deltas, and adding each to a growing string copies it every time.
    texts: list[str] = []
    fragments: dict[int, _Fragments] = {}
    done = False
    async for lines in _line_reads(chunks):
        fresh: list[str] = []
        for line in lines:
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            done = data == "[DONE]"
            if done:
                break
            _read_chunk(json.loads(data), completion, fresh, fragments)
        if fresh and on_text is not None:
            # One streamed chunk a delta, as the endpoint sent them; past ONE_BY_ONE
            # deltas, one for what each read brought (each chunk costs the task a
            # message, and the door an append).
            pieces = fresh if len(texts) < ONE_BY_ONE else ["".join(fresh)]
            for piece in pieces:
                await on_text(piece)
        texts += fresh
        if done:
            break
    completion.text = "".join(texts)
    completion.tool_requests = [fragments[index].request() for index in sorted(fragments)]
    return completion


def _read_chunk(chunk: Any, completion: Completion, texts: list[str],
                fragments: dict[int, _Fragments]) -> None:
    """One ``data:`` chunk: its usage, text deltas, tool call fragments and finish."""
    if not isinstance(chunk, dict):
        raise ValueError("a chunk that is not an object")
    _usage(completion, chunk.get("usage"))
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if isinstance(text, str) and text:
            texts.append(text)
        for fragment in delta.get("tool_calls") or ():
            _add_fragment(fragments, fragment)
        if choice.get("finish_reason"):
            completion.finish_reason = str(choice["finish_reason"])


@dataclass
class _Fragments:
    """One tool call as its fragments arrive."""

    id: str
    names: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)

    def request(self) -> ToolRequest:
        return ToolRequest(id=self.id, name="".join(self.names),
                           arguments="".join(self.arguments))


def _add_fragment(fragments: dict[int, _Fragments], fragment: dict[str, Any]) -> None:
    index = int(fragment.get("index", len(fragments)))
    function = fragment.get("function") or {}
    found = fragments.get(index)
    if found is None:
        found = fragments[index] = _Fragments(str(fragment.get("id") or f"call_{index}"))
    found.names.append(str(function.get("name") or ""))
    found.arguments.append(str(function.get("arguments") or ""))


def _read_whole(body: bytes) -> Completion:
    data = json.loads(body)
    if not isinstance(data, dict) or not data.get("choices"):
        raise ValueError("no choices")
    choice = data["choices"][0]
    message = choice.get("message") or {}
    completion = Completion(text=message.get("content") or "",
                            finish_reason=choice.get("finish_reason"))
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        completion.tool_requests.append(ToolRequest(
            id=str(call.get("id") or f"call_{index}"), name=str(function.get("name", "")),
            arguments=str(function.get("arguments") or "")))
    _usage(completion, data.get("usage"))
    return completion


def _usage(completion: Completion, usage: Any) -> None:
    if isinstance(usage, dict):
        completion.input_tokens = int(usage.get("prompt_tokens") or 0)
        completion.output_tokens = int(usage.get("completion_tokens") or 0)


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


def _error_text(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or "")
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return str(error or "")


def _reason(exc: Exception) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    if isinstance(exc, httpx.ProxyError):
        return "the connection was refused"
    return str(exc) or type(exc).__name__


def _clean(text: str) -> str:
    """``text`` one line, bounded, anything shaped like a token removed (an echoed key
    was replaced by the runtime's egress before this process saw it)."""
    flat = " ".join(text.split())
    flat = redact(flat)
    return flat if len(flat) <= DETAIL_LIMIT else flat[:DETAIL_LIMIT - 1] + "…"
