"""An httpx transport that sends requests with aiohttp's connection pool.

httpx's own pool (httpcore) costs far more CPU per request at high concurrency than
aiohttp's (``loadtests/bench_proxy.py`` measures both), so the formation proxy's inner
transport is this one when aiohttp is importable, else httpx's. Everything above the
transport stays httpx: the proxy, ``task.http``, timeouts, decoding, redirects.

aiohttp runs with ``auto_decompress=False`` (httpx decodes ``Content-Encoding`` itself),
never follows redirects, and its failures are raised as the matching httpx exceptions.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import httpx

try:  # a dependency; still optional here, so a trimmed install falls back to httpx
    import aiohttp
    import yarl
except ImportError:  # pragma: no cover - exercised where aiohttp is not installed
    aiohttp = None  # type: ignore[assignment]
    yarl = None  # type: ignore[assignment]

#: Framing headers aiohttp computes from the body it is handed.
_FRAMING = frozenset({b"content-length", b"transfer-encoding"})
#: How many converted URLs (and timeout pairs) are kept; emptied when full.
_URLS_KEPT = 256
_TIMEOUTS: dict[tuple[float | None, float | None], Any] = {}


def aiohttp_available() -> bool:
    return aiohttp is not None


def default_inner_transport(*, limit: int = 100) -> httpx.AsyncBaseTransport:
    """The pooled transport the formation proxy should wrap: aiohttp's when it is
    importable, else httpx's own with a pool of the same size."""
    if aiohttp is not None:
        return AiohttpTransport(limit=limit)
    return httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=limit,
                                                        max_keepalive_connections=limit))


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An ``httpx.AsyncBaseTransport`` over one ``aiohttp.ClientSession``, created in the
    running event loop on first use (a session is bound to its loop)."""

    def __init__(self, *, limit: int = 100, keepalive_timeout: float = 15.0) -> None:
        if aiohttp is None:
            raise RuntimeError("AiohttpTransport needs aiohttp; install it or use "
                               "httpx.AsyncHTTPTransport")
        self._limit = limit
        self._keepalive = keepalive_timeout
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._urls: dict[int, tuple[httpx.URL, Any]] = {}

    def __repr__(self) -> str:
        return f"AiohttpTransport(limit={self._limit})"

    def _session_now(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(limit=self._limit,
                                             keepalive_timeout=self._keepalive)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"))
            self._loop = loop
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        return await self._send(request.method, yarl.URL(str(request.url), encoded=True),
                                request.headers.raw, body, request.extensions.get("timeout"),
                                request)

    async def send_parts(self, method: str, url: httpx.URL,
                         headers: Sequence[tuple[bytes, bytes]], body: bytes,
                         timeout: Mapping[str, float | None] | None,
                         request: httpx.Request) -> httpx.Response:
        """A request given as its parts, for a caller that would otherwise build an
        ``httpx.Request`` only to hand it here (the formation proxy: 3.5 us a call) and
        that asks for the same few URL objects again (a door's URLs, which it keeps);
        ``request`` is what an error names, so the caller chooses which request that is
        (never one holding a token)."""
        return await self._send(method, self._yarl_url(url), headers, body, timeout, request)

    async def _send(self, method: str, url: Any, headers: Sequence[tuple[bytes, bytes]],
                    body: bytes, timeout: Mapping[str, float | None] | None,
                    request: httpx.Request) -> httpx.Response:
        session = self._session_now()
        pairs = [(name.decode("latin-1"), value.decode("latin-1"))
                 for name, value in headers if name.lower() not in _FRAMING]
        with _mapped_errors(request):
            response = await session.request(
                method, url, headers=pairs, data=body if body else None,
                allow_redirects=False, timeout=_timeout(timeout), compress=None)
        return httpx.Response(
            status_code=response.status,
            headers=list(response.raw_headers),
            stream=_ResponseStream(response),
            extensions={"http_version": _http_version(response),
                        "reason_phrase": (response.reason or "").encode("latin-1")},
        )

    def _yarl_url(self, url: httpx.URL) -> Any:
        """aiohttp's URL for ``url``; the same object asked again is converted once."""
        known = self._urls.get(id(url))
        if known is not None and known[0] is url:
            return known[1]
        converted = yarl.URL(str(url), encoded=True)
        if len(self._urls) >= _URLS_KEPT:
            self._urls.clear()
        self._urls[id(url)] = (url, converted)     # the URL held: its id stays its own
        return converted

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


def _http_version(response: aiohttp.ClientResponse) -> bytes:
    version = response.version
    return b"HTTP/1.1" if version is None else f"HTTP/{version.major}.{version.minor}".encode()


def _timeout(settings: Mapping[str, float | None] | None) -> Any:
    """aiohttp's timeouts for httpx's ``timeout`` extension; made once for each pair of
    values (callers repeat a few)."""
    connect = settings.get("connect") if settings else None
    read = settings.get("read") if settings else None
    known = _TIMEOUTS.get((connect, read))
    if known is None:
        known = aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)
        if len(_TIMEOUTS) < _URLS_KEPT:
            _TIMEOUTS[(connect, read)] = known
    return known


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # No request here: httpx attaches the response's own request to the error.
        with _mapped_errors(None):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        self._response.release()


@contextlib.contextmanager
def _mapped_errors(request: httpx.Request | None) -> Iterator[None]:
    """aiohttp's failures as the httpx exceptions callers of an httpx transport expect."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
    except (aiohttp.SocketTimeoutError, aiohttp.ServerTimeoutError, TimeoutError) as exc:
        raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx.ConnectError(str(exc), request=request) from exc
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
            aiohttp.ClientResponseError) as exc:
        raise httpx.RemoteProtocolError(str(exc), request=request) from exc
    except aiohttp.ClientOSError as exc:
        raise httpx.ReadError(str(exc), request=request) from exc
    except aiohttp.ClientError as exc:
        raise httpx.NetworkError(str(exc), request=request) from exc
