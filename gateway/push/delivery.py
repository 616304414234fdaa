"""Delivering push notifications: each configuration's events go out in order, on a
lane of their own, so a receiver that hangs or fails holds back only its own
configuration's events.

When an event is handed over (:meth:`PushDelivery.send`, never waiting), it joins its
configuration's lane: a queue of at most :attr:`DeliveryPolicy.queue` events; past it
the lane's *oldest* event is dropped (recorded and counted), so the newest, a task's
end included, still goes out. A lane with events has one worker that sends them one at
a time, in order; a lane that empties ends.

For each event a worker takes, in this order, each try:

1. a slot: one of :attr:`DeliveryPolicy.per_host` for the webhook's host, then one of
   :attr:`DeliveryPolicy.per_owner` for the configuration's owner, then one of the
   door's :attr:`DeliveryPolicy.in_flight` (always in that order, so no two workers
   wait on each other). A host that never answers holds at most its own slots, and one
   caller at most its own: every other receiver still finds one. The slot is held
   for the try only, never for a backoff;
2. the target (first try only): the URL's host and port on the door's allow-list
   (``network.push.allow``, :class:`gateway.proxy.egress.AllowList`), then its name
   resolved once; an address inside the machine or its networks (loopback, private,
   link-local) is refused unless the allow-list names that address itself (a name on
   the list that resolves inside is DNS rebinding, not a webhook); the address found is
   the one connected to, for every try of this event (aiohttp with a resolver that
   answers only it, one session per try);
3. the request: ``POST`` of the ``StreamResponse`` as ``application/a2a+json``, with the
   configuration's ``X-A2A-Notification-Token`` (as a2a-sdk sends it) and
   ``Authorization: <scheme> <credentials>``: nothing of the door's own, ever;
4. the answer: a 2xx is delivered; a redirect is refused (never followed); anything
   else, or no answer within the timeout, is tried again after a backoff that doubles,
   within :class:`DeliveryPolicy`'s tries and time, then given up.

Each try is a ``push_delivery`` trace record (``outcome``: ``delivered``, ``retrying``,
``failed``, ``refused``, or ``dropped`` when its lane was full), naming the webhook by
scheme, host and port only: a path or query may hold the receiver's secret. Each event
is counted once when queued and once when it settles (:meth:`DoorMetrics.push_event`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.errors import GatewayError
from gateway.proxy.egress import AllowList, default_port
from gateway.push.configs import PushConfig
from gateway.trace.bus import TraceBus

if TYPE_CHECKING:
    from gateway.metrics import DoorMetrics

__all__ = ["DeliveryPolicy", "PushDelivery", "PushRefused", "Resolve"]

log = logging.getLogger("murmur.door")

#: A name and port to the addresses they resolve to (the event loop's getaddrinfo).
Resolve = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """How hard a lane tries (A2A 1.0 section 13.2: timeouts of 10-30 s, retries
    with exponential backoff, a bounded number of tries), and how much it may hold
    (docs/limits.md, Push)."""

    tries: int = 4
    first_backoff: float = 0.25
    max_backoff: float = 4.0
    timeout: float = 10.0
    #: All tries of one event together.
    deadline: float = 30.0
    #: Events waiting for one configuration's webhook; past it, its oldest is dropped
    #: (and recorded). The door's whole backlog is at most this many a configuration.
    queue: int = 64
    #: Deliveries in flight at once at the door...
    in_flight: int = 16
    #: ... to one receiver host (the URL's host name, any port) ...
    per_host: int = 4
    #: ... and for one owner's configurations.
    per_owner: int = 8


class PushRefused(GatewayError):
    """A webhook the door will not send to (off the allow-list, resolving inside, a
    redirect); its text says which, with no secret in it."""


class _Lane:
    """One configuration's events waiting, oldest first, and the worker sending them."""

    __slots__ = ("events", "worker")

    def __init__(self) -> None:
        self.events: deque[tuple[PushConfig, dict[str, Any]]] = deque()
        self.worker: asyncio.Task[None] | None = None


class _KeyedSlots:
    """At most ``limit`` holders per key; a key's semaphore lives while anyone holds or
    waits for it (no entry is kept for a host or owner with nothing in flight)."""

    __slots__ = ("_entries", "_limit")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._entries: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = (asyncio.Semaphore(self._limit), [0])
        semaphore, users = entry
        users[0] += 1
        try:
            async with semaphore:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._entries[key]


class PushDelivery:
    """The door's push delivery, a lane per configuration (see the module text)."""

    def __init__(self, allow: AllowList, trace: TraceBus,
                 policy: DeliveryPolicy | None = None, resolve: Resolve | None = None, *,
                 metrics: DoorMetrics | None = None) -> None:
        self._allow = allow
        self._trace = trace
        self._policy = policy if policy is not None else DeliveryPolicy()
        self._resolve = resolve if resolve is not None else _getaddrinfo
        self._metrics = metrics
        self._lanes: dict[tuple[str, str, str], _Lane] = {}
        self._door = asyncio.Semaphore(self._policy.in_flight)
        self._hosts = _KeyedSlots(self._policy.per_host)
        self._owners = _KeyedSlots(self._policy.per_owner)
        #: Events queued or being sent; ``_idle`` is set when there are none.
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def pending(self) -> int:
        """Events handed over and not yet delivered, given up, refused or dropped."""
        return self._pending

    def send(self, config: PushConfig, event: dict[str, Any]) -> None:
        """Queue ``event`` on ``config``'s lane (never waits)."""
        key = (config.task_id, config.owner, config.id)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        if len(lane.events) >= self._policy.queue:
            old_config, old_event = lane.events.popleft()
            self._settled(old_config, old_event, 0, "dropped",
                          error=f"{self._policy.queue} events were waiting for this "
                                "webhook; the oldest was dropped")
        lane.events.append((config, event))
        self._pending += 1
        self._idle.clear()
        self._count("queued")
        if lane.worker is None:
            lane.worker = asyncio.get_running_loop().create_task(
                self._work(key, lane), name=f"murmur-push-{config.task_id[:16]}")

    async def drained(self) -> None:
        """Wait until every queued event was delivered, given up or dropped."""
        await self._idle.wait()

    async def aclose(self, grace: float = 2.0) -> None:
        """Let what is queued go out for ``grace`` seconds, then stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), grace)
        workers = [lane.worker for lane in self._lanes.values() if lane.worker is not None]
        self._lanes.clear()
        for worker in workers:
            worker.cancel()
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    # --- a lane's worker ----------------------------------------------------------------

    async def _work(self, key: tuple[str, str, str], lane: _Lane) -> None:
        try:
            # No await between the last look at the queue and the lane's removal: an
            # event handed over meanwhile would find a lane with no worker.
            while lane.events:
                config, event = lane.events.popleft()
                try:
                    await self._deliver(config, event)
                except Exception as exc:  # noqa: BLE001 - one webhook never stops a lane
                    log.exception("push delivery for task %s failed", config.task_id[:64])
                    self._settled(config, event, 0, "failed", error=type(exc).__name__)
        finally:
            lane.worker = None
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    @contextlib.asynccontextmanager
    async def _slot(self, host: str, owner: str) -> AsyncIterator[None]:
        """One try's place: the host's, the owner's, then the door's (in that order)."""
        async with self._hosts.hold(host), self._owners.hold(owner), self._door:
            yield

    async def _deliver(self, config: PushConfig, event: dict[str, Any]) -> None:
        policy = self._policy
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + policy.deadline
        host_key = (urlsplit(config.url).hostname or "").rstrip(".").lower()
        body = json.dumps(event, separators=(",", ":")).encode("utf-8")
        target: tuple[str, str] | None = None
        backoff = policy.first_backoff
        for attempt in range(1, policy.tries + 1):
            status: int | None = None
            error: str | None = None
            async with self._slot(host_key, config.owner):
                try:
                    if target is None:
                        target = await asyncio.wait_for(self._target(config.url),
                                                        policy.timeout)
                    status = await self._post(target, config, body)
                    if not 200 <= status < 300:
                        error = f"answered {status}"
                except PushRefused as refused:
                    self._settled(config, event, attempt, "refused", status, str(refused))
                    return
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    error = f"{type(exc).__name__}: {str(exc)[:200]}" if str(exc) else \
                        type(exc).__name__
            if error is None:
                self._settled(config, event, attempt, "delivered", status)
                return
            last = attempt == policy.tries or loop.time() + backoff >= give_up_at
            if last:
                self._settled(config, event, attempt, "failed", status, error)
                return
            self._record(config, event, attempt, "retrying", status, error)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, policy.max_backoff)

    async def _post(self, target: tuple[str, str], config: PushConfig, body: bytes) -> int:
        headers = {"Content-Type": "application/a2a+json"}
        if config.token is not None:
            headers["X-A2A-Notification-Token"] = config.token
        if config.scheme is not None and config.credentials is not None:
            headers["Authorization"] = f"{config.scheme} {config.credentials}"
        # A session of its own for each try: its resolver answers this host with the
        # address checked for this event, and tries in flight at once never share one.
        connector = aiohttp.TCPConnector(resolver=_PinnedResolver(*target),
                                         use_dns_cache=False, force_close=True)
        timeout = aiohttp.ClientTimeout(total=self._policy.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                         trust_env=False) as session, \
                session.post(config.url, data=body, headers=headers,
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

    # --- records and counts -------------------------------------------------------------

    def _settled(self, config: PushConfig, event: dict[str, Any], attempt: int,
                 outcome: str, status: int | None = None, error: str | None = None) -> None:
        """The last word on one event: recorded, counted, no longer pending."""
        self._record(config, event, attempt, outcome, status, error)
        self._count(outcome)
        self._pending -= 1
        if not self._pending:
            self._idle.set()

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.push_event(outcome)

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
    """aiohttp's resolver that answers the one address checked for one host, nothing
    else (one for each try's session)."""

    def __init__(self, host: str, address: str) -> None:
        self._host = host
        self._address = address

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        if host.rstrip(".").lower() != self._host:
            raise OSError(f"{host} was not checked for this delivery")
        ip = ipaddress.ip_address(self._address)
        return [{"hostname": host, "host": self._address, "port": port,
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
