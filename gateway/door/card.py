"""The door's agent card: built once (and again when the door learns its URL), served
with ``Cache-Control``, ``ETag`` and ``Last-Modified``, ``304`` on a matching
``If-None-Match``.

The card lists both of the door's HTTP interfaces at its URL (``JSONRPC`` first, then
``HTTP+JSON``), and ``GRPC`` at its own address when the door serves it (docs/grpc.md).
A door with ``network.public_card`` also serves a public card to a request without a
credential (DoorAuth marks it :data:`gateway.caller.ANONYMOUS_CALLER`): the same card
without the session extension, which names the member, its session and its formation.

A card whose :class:`CardInfo` has ``extended_skills``, at a door that authenticates,
says ``capabilities.extendedAgentCard: true``; :func:`extended_card` is what
``GetExtendedAgentCard`` answers an authenticated caller with (the card as served with
those skills after its own, unsigned: the signature covered the card without them). The
public card never holds them.

In order: the card's parts (:class:`Skill`, :class:`CardInfo`), building it
(:func:`build_card`, :func:`extended_card`, :func:`public_card`), serving it
(:class:`CardRoute`), and a gateway member's card merged with its upstream's
(:func:`merged_card`)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from email.utils import formatdate, parsedate_to_datetime
from typing import Any

from gateway.a2a.jsonrpc import dumps
from gateway.a2a.models import AgentCard
from gateway.caller import ANONYMOUS_CALLER, CALLER_SCOPE_KEY
from gateway.door.card_signing import signature_valid
from gateway.http_io import header, send_response
from gateway.protocol import (
    A2A_VERSION,
    GRPC_BINDING,
    HTTP_JSON_BINDING,
    JSONRPC_BINDING,
    SESSION_EXTENSION_URI,
)
from gateway.types import Headers, Receive, Scope, Send

#: How long a client may reuse the card without asking again; the card of a door only
#: changes when the door restarts (new session), and a revalidation costs one 304.
CARD_CACHE_CONTROL = b"private, max-age=60"
BEARER_SCHEME = "bearer"


@dataclass(frozen=True, slots=True)
class Skill:
    """One entry of the card's ``skills`` (the manifest's ``agent.skills``)."""

    id: str
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CardInfo:
    """What the card says about the member; the launcher fills it from the manifest."""

    name: str
    description: str
    version: str
    skills: tuple[Skill, ...] = ()
    member: str | None = None
    session_id: str | None = None
    formation_id: str | None = None
    #: The door's own URL; when it is only known after the socket is bound, leave it
    #: empty and call ``Door.set_url`` before the door is announced.
    door_url: str = ""
    input_modes: tuple[str, ...] = ("text/plain",)
    output_modes: tuple[str, ...] = ("text/plain",)
    #: The key the card's signature verifies with (unpadded base64url of the raw Ed25519
    #: public key): the formation key, or a standalone door's ``--card-signing-key``.
    signing_key: str | None = None
    #: The gRPC binding's address (``127.0.0.1:<port>``), when the door serves it.
    grpc_url: str = ""
    #: Whether the door sends push notifications (``network.push.allow``, docs/push.md).
    push_notifications: bool = False
    #: The skills only an authenticated caller sees (``GetExtendedAgentCard``); None: the
    #: door has no extended card.
    extended_skills: tuple[Skill, ...] | None = None


def build_card(info: CardInfo, *, authenticated: bool) -> dict[str, Any]:
    """The AgentCard dict (validated against the A2A model)."""
    card: dict[str, Any] = {
        "name": info.name,
        "description": info.description,
        "supportedInterfaces": _interfaces(info),
        "version": info.version,
        "capabilities": {
            "streaming": True,
            "pushNotifications": info.push_notifications,
            "extendedAgentCard": authenticated and info.extended_skills is not None,
            "extensions": [{
                "uri": SESSION_EXTENSION_URI,
                "description": "The member's roster name, its session id and its formation id.",
                "params": {
                    "member": info.member,
                    "sessionId": info.session_id,
                    "formationId": info.formation_id,
                    **({"signingKey": info.signing_key} if info.signing_key else {}),
                },
            }],
        },
        "defaultInputModes": list(info.input_modes),
        "defaultOutputModes": list(info.output_modes),
        "skills": [_skill(skill) for skill in info.skills],
    }
    if authenticated:
        card["securitySchemes"] = {BEARER_SCHEME: {"httpAuthSecurityScheme": {
            "scheme": "Bearer",
            "description": "The session's operator token, a declared credential, "
                           "or a formation token for this member.",
        }}}
        card["securityRequirements"] = [{"schemes": {BEARER_SCHEME: {"list": []}}}]
    return AgentCard.model_validate(card).wire()


def _interfaces(info: CardInfo) -> list[dict[str, str]]:
    """JSON-RPC first (the binding a client without a preference takes), then HTTP+JSON
    at the same URL, then gRPC at its own address when the door serves it."""
    interfaces = [
        {"url": info.door_url, "protocolBinding": binding, "protocolVersion": A2A_VERSION}
        for binding in (JSONRPC_BINDING, HTTP_JSON_BINDING)]
    if info.grpc_url:
        interfaces.append({"url": info.grpc_url, "protocolBinding": GRPC_BINDING,
                           "protocolVersion": A2A_VERSION})
    return interfaces


def extended_card(card: dict[str, Any], info: CardInfo) -> dict[str, Any] | None:
    """What ``GetExtendedAgentCard`` answers: ``card`` (as served, a gateway member's
    merged with its upstream's) with ``info.extended_skills`` after its skills and
    without a signature, which covered the card without them; None when ``card`` declares
    no extended card."""
    capabilities = card.get("capabilities") or {}
    if not capabilities.get("extendedAgentCard") or info.extended_skills is None:
        return None
    extended = {key: value for key, value in card.items() if key != "signatures"}
    extended["skills"] = [*card.get("skills", ()),
                          *(_skill(skill) for skill in info.extended_skills)]
    return extended


def public_card(card: dict[str, Any]) -> dict[str, Any]:
    """``card`` without the session extension (what anyone may read at a door with
    ``network.public_card``), and without the signature, which covered the extension."""
    card = {key: value for key, value in card.items() if key != "signatures"}
    capabilities = dict(card.get("capabilities") or {})
    extensions = [extension for extension in capabilities.get("extensions") or []
                  if extension.get("uri") != SESSION_EXTENSION_URI]
    if extensions:
        capabilities["extensions"] = extensions
    else:
        capabilities.pop("extensions", None)
    return {**card, "capabilities": capabilities}


def _skill(skill: Skill) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": skill.id, "name": skill.name,
                             "description": skill.description, "tags": list(skill.tags)}
    if skill.examples:
        entry["examples"] = list(skill.examples)
    return entry


#: How a card is made from what the door knows: :func:`build_card`, or for a gateway
#: member the upstream's card merged with the door's (``gateway.relay.tasks``).
CardBuilder = Callable[[CardInfo, bool], dict[str, Any]]


def _build_card(info: CardInfo, authenticated: bool) -> dict[str, Any]:
    return build_card(info, authenticated=authenticated)


class CardRoute:
    """``GET /.well-known/agent-card.json`` with HTTP caching."""

    def __init__(self, info: CardInfo, *, authenticated: bool,
                 build: CardBuilder = _build_card) -> None:
        self._info = info
        self._authenticated = authenticated
        self._build = build
        self._signature: dict[str, str] | None = None
        self._rebuild(info)

    @property
    def info(self) -> CardInfo:
        return self._info

    @property
    def card(self) -> dict[str, Any]:
        return self._card

    @property
    def extended(self) -> dict[str, Any] | None:
        """The extended card (:func:`extended_card`), or None when the card declares none."""
        return self._extended

    def at(self, url: str, grpc_url: str = "") -> CardRoute:
        """The same card naming ``url`` (a listener beyond loopback), built the same way
        (a gateway member's merged with its upstream's), unsigned, its gRPC interface at
        ``grpc_url`` (the published one; none when gRPC is not published there)."""
        return CardRoute(replace(self._info, door_url=url, grpc_url=grpc_url),
                         authenticated=self._authenticated, build=self._build)

    def set_url(self, url: str) -> None:
        """Put the door's URL on the card (a new ETag and Last-Modified); a signature of
        the card before is dropped."""
        self._signature = None
        self._rebuild(replace(self._info, door_url=url))

    def set_grpc_url(self, url: str) -> None:
        """List the door's gRPC binding at ``url`` on the card (as :meth:`set_url`)."""
        self._signature = None
        self._rebuild(replace(self._info, grpc_url=url))

    def sign(self, signature: dict[str, str], public_key: bytes) -> bool:
        """Serve the card with ``signature`` (in ``signatures``) when it verifies under
        ``public_key`` for the card as it is now; whether it did. The public card (no
        session extension) and a listener's card (another URL) stay unsigned: the
        signature covers this card only."""
        if not signature_valid(self._card, signature, public_key):
            return False
        self._signature = dict(signature)
        self._rebuild(self._info)
        return True

    def _rebuild(self, info: CardInfo) -> None:
        self._info = info
        self._card = self._build(info, self._authenticated)
        self._extended = extended_card(self._card, info)
        if self._signature is not None:
            self._card = {**self._card, "signatures": [self._signature]}
        self._full = _CardBody(dumps(self._card))
        self._public = _CardBody(dumps(public_card(self._card)))
        self._modified_seconds = int(time.time())
        self._last_modified = formatdate(self._modified_seconds, usegmt=True).encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        served = self._public if scope.get(CALLER_SCOPE_KEY) is ANONYMOUS_CALLER else self._full
        headers: Headers = [
            (b"cache-control", CARD_CACHE_CONTROL),
            (b"etag", served.etag),
            (b"last-modified", self._last_modified),
        ]
        if self._not_modified(scope, served.etag):
            await send({"type": "http.response.start", "status": 304, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        headers.append((b"content-type", b"application/json"))
        await send_response(send, 200, served.body, headers, head=scope["method"] == "HEAD")

    def _not_modified(self, scope: Scope, etag: bytes) -> bool:
        if_none_match = header(scope, b"if-none-match")
        if if_none_match is not None:
            return _etag_matches(if_none_match, etag)
        if_modified_since = header(scope, b"if-modified-since")
        if if_modified_since is not None:
            try:
                since = parsedate_to_datetime(if_modified_since.decode("latin-1"))
            except (TypeError, ValueError):
                return False
            return int(since.timestamp()) >= self._modified_seconds
        return False


class _CardBody:
    """One card as served: its bytes and their ETag."""

    __slots__ = ("body", "etag")

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.etag = b'"' + hashlib.sha256(body).hexdigest()[:32].encode("ascii") + b'"'


def _etag_matches(if_none_match: bytes, etag: bytes) -> bool:
    """RFC 9110 weak comparison of an If-None-Match list against our tag."""
    for candidate in if_none_match.split(b","):
        candidate = candidate.strip()
        if candidate == b"*" or candidate.removeprefix(b"W/") == etag:
            return True
    return False


#: What a gateway member's card takes from its upstream's card, as it is there
#: (docs/gateway.md); everything else is the door's.
UPSTREAM_CARD_FIELDS = ("name", "description", "version", "skills", "defaultInputModes",
                        "defaultOutputModes", "provider", "documentationUrl", "iconUrl")


def merged_card(upstream: dict[str, Any], info: CardInfo, *,
                authenticated: bool) -> dict[str, Any]:
    """A gateway member's card: the upstream's name, description, version, skills, modes,
    provider and streaming, with the door's ``supportedInterfaces``, security schemes and
    session extension, push notifications off, and no signature of the upstream's (it
    signed another card). A field the upstream leaves out, or gives in the wrong shape,
    is the door's own."""
    card = build_card(info, authenticated=authenticated)
    for key in UPSTREAM_CARD_FIELDS:
        value = upstream.get(key)
        if value is None:
            continue
        if key in ("skills", "defaultInputModes", "defaultOutputModes"):
            if not isinstance(value, list):
                continue
            if key == "skills":
                value = [_skill_of_1_0(skill) for skill in value]
        elif key == "provider":
            if not isinstance(value, dict):
                continue
        elif not isinstance(value, str):
            continue
        card[key] = value
    capabilities = upstream.get("capabilities")
    streaming = capabilities.get("streaming") if isinstance(capabilities, dict) else None
    card["capabilities"] = {**card["capabilities"], "streaming": streaming is True}
    return card


def _skill_of_1_0(skill: Any) -> Any:
    """A skill without an A2A 0.3 card's ``security`` (1.0 has ``securityRequirements``;
    either names the upstream's schemes, which the door's card does not have)."""
    if isinstance(skill, dict) and "security" in skill:
        return {key: value for key, value in skill.items() if key != "security"}
    return skill
