"""Delivering push notifications: one bounded worker per door POSTs each event of a task
to each of its configurations' webhooks, in order.

For each (configuration, event) taken from the queue, in this order:

1. the target: the URL's host and port on the door's allow-list (``network.push.allow``,
   :class:`gateway.proxy.egress.AllowList`), then its name resolved once; an address
   inside the machine or its networks (loopback, private, link-local) is refused unless
   the allow-list names that address itself (a name on the list that resolves inside is
   DNS rebinding, not a webhook); the address found is the one connected to, for every
   try of this event (aiohttp with a resolver that answers only it);
2. the request: ``POST`` of the ``StreamResponse`` as ``application/a2a+json``, with the
   configuration's ``X-A2A-Notification-Token`` (as a2a-sdk sends it) and
   ``Authorization: <scheme> <credentials>``: nothing of the door's own, ever;
3. the answer: a 2xx is delivered; a redirect is refused (never followed); anything
   else, or no answer within the timeout, is tried again after a backoff that doubles,
   within :class:`DeliveryPolicy`'s tries and time, then given up.

Each try is a ``push_delivery`` trace record (``outcome``: ``delivered``, ``retrying``,
``failed``, ``refused``, or ``dropped`` when the queue was full), naming the webhook by
scheme, host and port only: a path or query may hold the receiver's secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.errors import GatewayError
from gateway.proxy.egress import AllowList, default_port
from gateway.push.configs import PushConfig
from gateway.trace.bus import TraceBus

__all__ = ["DeliveryPolicy", "PushDelivery", "PushRefused", "Resolve"]

log = logging.getLogger("murmur.door")

#: A name and port to the addresses they resolve to (the event loop's getaddrinfo).
Resolve = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """How hard the worker tries (A2A 1.0 section 13.2: timeouts of 10-30 s, retries
    with exponential backoff, a bounded number of tries)."""

    tries: int = 4
    first_backoff: float = 0.25
    max_backoff: float = 4.0
    timeout: float = 10.0
    #: All tries of one event together.
    deadline: float = 30.0
    #: Events waiting to be sent; past it, new ones are dropped (and recorded).
    queue: int = 1024


class PushRefused(GatewayError):
    """A webhook the door will not send to (off the allow-list, resolving inside, a
    redirect); its text says which, with no secret in it."""


class PushDelivery:
    """The door's one delivery worker (see the module text)."""

    def __init__(self, allow: AllowList, trace: TraceBus,
                 policy: DeliveryPolicy | None = None, resolve: Resolve | None = None) -> None:
        self._allow = allow
        self._trace = trace
        self._policy = policy if policy is not None else DeliveryPolicy()
        self._resolve = resolve if resolve is not None else _getaddrinfo
        self._queue: asyncio.Queue[tuple[PushConfig, dict[str, Any]]] = asyncio.Queue(
            self._policy.queue)
        self._worker: asyncio.Task[None] | None = None
        self._pinned = _PinnedResolver()

    def send(self, config: PushConfig, event: dict[str, Any]) -> None:
        """Queue ``event`` for ``config``'s webhook (never waits)."""
        try:
            self._queue.put_nowait((config, event))
        except asyncio.QueueFull:
            self._record(config, event, 0, "dropped", error="the delivery queue is full")
            return
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(
                self._work(), name="murmur-push-delivery")

    async def drained(self) -> None:
        """Wait until every queued event was delivered or given up."""
        await self._queue.join()

    async def aclose(self, grace: float = 2.0) -> None:
        """Let what is queued go out for ``grace`` seconds, then stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace)
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    # --- the worker ---------------------------------------------------------------------

    async def _work(self) -> None:
        connector = aiohttp.TCPConnector(resolver=self._pinned, use_dns_cache=False,
                                         force_close=True)
        timeout = aiohttp.ClientTimeout(total=self._policy.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                         trust_env=False) as session:
            while True:
                config, event = await self._queue.get()
                try:
                    await self._deliver(session, config, event)
                except Exception:  # noqa: BLE001 - one webhook never stops the worker
                    log.exception("push delivery for task %s failed", config.task_id[:64])
                finally:
                    self._queue.task_done()

    async def _deliver(self, session: aiohttp.ClientSession, config: PushConfig,
                       event: dict[str, Any]) -> None:
        policy = self._policy
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + policy.deadline
        try:
            host, address = await self._target(config.url)
        except PushRefused as refused:
            self._record(config, event, 1, "refused", error=str(refused))
            return
        body = json.dumps(event, separators=(",", ":")).encode("utf-8")
        backoff = policy.first_backoff
        for attempt in range(1, policy.tries + 1):
            status: int | None = None
            try:
                self._pinned.pin(host, address)
                status = await self._post(session, config, body)
                error = None if 200 <= status < 300 else f"answered {status}"
            except PushRefused as refused:
                self._record(config, event, attempt, "refused", status, str(refused))
                return
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                error = f"{type(exc).__name__}: {str(exc)[:200]}" if str(exc) else \
                    type(exc).__name__
            if error is None:
                self._record(config, event, attempt, "delivered", status)
                return
            last = attempt == policy.tries or loop.time() + backoff >= give_up_at
            self._record(config, event, attempt, "failed" if last else "retrying",
                         status, error)
            if last:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, policy.max_backoff)

    async def _post(self, session: aiohttp.ClientSession, config: PushConfig,
                    body: bytes) -> int:
        headers = {"Content-Type": "application/a2a+json"}
        if config.token is not None:
            headers["X-A2A-Notification-Token"] = config.token
        if config.scheme is not None and config.credentials is not None:
            headers["Authorization"] = f"{config.scheme} {config.credentials}"
        async with session.post(config.url, data=body, headers=headers,
                                allow_redirects=False) as response:
            await response.read()
            if 300 <= response.status < 400:
                raise PushRefused(f"the webhook redirected ({response.status}); a push "
                                  "notification follows no redirect")
            return response.status

    async def _target(self, url: str) -> tuple[str, str]:
        """The URL's host and the one address it is sent to (see the module text)."""
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".").lower()
        port = parts.port or default_port(parts.scheme) or 0
        if not self._allow.allows_host(host, port):
            raise PushRefused(f"{host}:{port} is not on network.push.allow")
        literal = _address(host)
        if literal is not None:
            return host, str(literal)
        addresses = await self._resolve(host, port)
        if not addresses:
            raise PushRefused(f"{host} resolves to no address")
        address = addresses[0]
        resolved = _address(address)
        if resolved is None or (_inside(resolved) and not self._allow.allows_host(
                str(resolved), port)):
            raise PushRefused(f"{host} resolves to {address}, an address inside that "
                              "network.push.allow does not name")
        return host, address

    def _record(self, config: PushConfig, event: dict[str, Any], attempt: int, outcome: str,
                status: int | None = None, error: str | None = None) -> None:
        parts = urlsplit(config.url)
        fields: dict[str, Any] = {
            "task_id": config.task_id, "config_id": config.id,
            "url": f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}",
            "event_kind": next(iter(event), None), "attempt": attempt, "outcome": outcome}
        if status is not None:
            fields["status"] = status
        if error is not None:
            fields["error"] = error
        self._trace.emit("push_delivery", **fields)


class _PinnedResolver(AbstractResolver):
    """aiohttp's resolver that answers the one address checked for a host, nothing else
    (the worker sends one request at a time, and pins before each)."""

    def __init__(self) -> None:
        self._pins: dict[str, str] = {}

    def pin(self, host: str, address: str) -> None:
        self._pins = {host: address}

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        address = self._pins.get(host.rstrip(".").lower())
        if address is None:
            raise OSError(f"{host} was not checked for this delivery")
        ip = ipaddress.ip_address(address)
        return [{"hostname": host, "host": address, "port": port,
                 "family": socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        return None


async def _getaddrinfo(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _inside(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """An address of this machine or its private networks (A2A 1.0 section 13.2)."""
    return (address.is_loopback or address.is_private or address.is_link_local
            or address.is_unspecified or address.is_multicast or address.is_reserved)
