"""``task.http`` in the agent process: an httpx client on the member's forward proxy.

Every request goes to the forward proxy (``http://`` in absolute form, ``https://`` as a
``CONNECT`` tunnel), which applies the formation's rules where the tokens are. What the
proxy refuses itself it marks ``Proxy-Status: murmur; error=<code>``; this client turns
those answers (and a redirect whose formation ``Location`` the proxy removed) back into
the exceptions agent code saw when the proxy ran in its own process
(``FormationRefused``, ``EgressRefused``, ``DoorUnavailable``), so an agent keeps one
way to learn it was refused. A refused ``CONNECT`` is httpx's own ``ProxyError``.

A model member's driver reaches its endpoint another way (:class:`AbsoluteFormTransport`):
every request, ``https://`` too, goes to the forward proxy in absolute form, never as a
tunnel, so the runtime's egress sees it, attaches the key the agent process never holds,
and counts what it spends (docs/llm.md, "The key").
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx

from gateway.proxy.formation import (
    DoorUnavailable,
    EgressRefused,
    FormationClient,
    FormationRefused,
    names_formation,
)

#: The timeouts of ``task.http`` (as the in-process client had).
TIMEOUT = httpx.Timeout(30.0, connect=10.0)


#: Names, to the forward proxy, the task a request is for (its trace record and trust).
TASK_HEADER = "Proxy-Murmur-Task"


class RefusalTransport(httpx.AsyncBaseTransport):
    """One task's view of the shared pool: each request names the task to the proxy;
    the proxy's own refusals come back as exceptions, every other answer as it came.
    Closing it leaves the pool open (the agent process closes that at its end)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, task_id: str) -> None:
        self._inner = inner
        self._task_id = task_id

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        _check_host(request)
        request.headers[TASK_HEADER] = self._task_id
        response = await self._inner.handle_async_request(request)
        marker = response.headers.get("proxy-status", "")
        name, _, params = marker.partition(";")
        if name.strip() != "murmur":
            return response
        error = params.strip().removeprefix("error=")
        if error not in ("formation_refused", "egress_refused", "door_unavailable"):
            return response
        body = await response.aread()
        await response.aclose()
        message = _message(body) or error
        if error == "formation_refused":
            raise FormationRefused(request)
        if error == "egress_refused":
            raise EgressRefused(message, request=request)
        raise DoorUnavailable(message, request=request)

    async def aclose(self) -> None:
        pass


def _check_host(request: httpx.Request) -> None:
    """A ``Host`` header that disagrees with a URL when either names the formation is
    refused before anything is sent, as the in-process proxy refused it (the forward
    proxy would replace it with the URL's authority, RFC 9112, and send it there)."""
    given = request.headers.get("host", "")
    authority = request.url.netloc.decode("ascii", "replace")
    if given != authority and (names_formation(given) or names_formation(authority)):
        raise FormationRefused(request)


def _message(body: bytes) -> str:
    try:
        data: Any = json.loads(body)
    except ValueError:
        return ""
    message = data.get("message") if isinstance(data, dict) else None
    return message if isinstance(message, str) else ""


def proxy_pool(proxy_url: str | None) -> httpx.AsyncBaseTransport:
    """The agent process's one connection pool, every connection to the forward proxy."""
    return httpx.AsyncHTTPTransport(proxy=proxy_url, trust_env=False)


def task_client(pool: httpx.AsyncBaseTransport, task_id: str) -> httpx.AsyncClient:
    """``task.http`` of one task. FormationClient vets the URL text before httpx
    normalizes it (``B.formation.invalid`` is refused, not lowercased into a callee's
    name), as the in-process client did."""
    return FormationClient(transport=RefusalTransport(pool, task_id), timeout=TIMEOUT,
                           trust_env=False)


class AbsoluteFormTransport(httpx.AsyncBaseTransport):
    """Each request sent to the forward proxy as ``METHOD <absolute URL> HTTP/1.1`` on a
    plain connection (httpcore's ``target`` extension), with the proxy's credential;
    an ``https://`` URL is then the proxy's to open, TLS and all."""

    def __init__(self, proxy_url: str) -> None:
        proxy = httpx.URL(proxy_url)
        self._origin = proxy.copy_with(username=None, password=None, path="/")
        credential = f"{proxy.username}:{proxy.password}".encode()
        self._authorization = b"Basic " + base64.b64encode(credential)
        self._inner = httpx.AsyncHTTPTransport(trust_env=False)

    def __repr__(self) -> str:  # never the proxy's secret
        return "AbsoluteFormTransport(...)"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        headers = [(name, value) for name, value in request.headers.raw
                   if name.lower() not in (b"host", b"proxy-authorization")]
        headers += [(b"Host", request.url.netloc),
                    (b"Proxy-Authorization", self._authorization)]
        sent = httpx.Request(request.method, self._origin, headers=headers,
                             stream=request.stream,
                             extensions={**request.extensions, "target": bytes(
                                 str(request.url), "ascii")})
        response = await self._inner.handle_async_request(sent)
        response.request = request
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
