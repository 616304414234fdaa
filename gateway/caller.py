"""Who is calling: the record DoorAuth leaves on the ASGI scope for the app behind it.

This module is the contract between the auth middleware (``gateway.auth.door_auth``) and the A2A
layer (``gateway.door.app``): the middleware decides, the app only reads.

It is also the one place that says which methods a credential reaches, in this order:
the method names a door knows (:data:`KNOWN_METHODS`), the five scopes of a formation
token (:data:`FORMATION_SCOPES`), and each credential's :attr:`Credential.reach`, worked
out once when the credential is made (:func:`reach_of`), which DoorAuth's scope check
(check 5) looks a method up in on every binding. A formation token's reach is a closed
list: a method added to the door later is refused to it unless it is added there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: The ASGI scope key under which DoorAuth stores the :class:`Caller` of a request.
CALLER_SCOPE_KEY = "murmur.caller"
#: The ASGI scope key under which DoorAuth stores the parsed JSON-RPC request object
#: (a dict) when it read one, so the app need not parse the body a second time.
RPC_SCOPE_KEY = "murmur.rpc"

CredentialKind = Literal["operator", "bearer", "jwt", "member", "public"]
Origin = Literal["operator", "peer", "client", "public"]
Trust = Literal["trusted", "untrusted"]

#: Every JSON-RPC method a door serves, plus the two HTTP routes that carry a method name.
TASK_METHODS: frozenset[str] = frozenset(
    {"SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "ListTasks",
     "SubscribeToTask"}
)
#: The agent card at its well-known path (``GET /.well-known/agent-card.json``): how a
#: caller learns what a door serves before it calls anything (A2A 1.0's discovery, not one
#: of its methods), so every accepted credential reaches it, a formation token included.
AGENT_CARD_METHOD = "AgentCard"
#: What every declared credential may read whatever its scopes: the agent card, and the
#: extended card (A2A asks only that its caller be authenticated; docs/door-auth.md). A
#: formation token reads the agent card only: ``GetExtendedAgentCard`` is an A2A method,
#: and none of its five scopes (the reference's table).
CARD_METHODS: frozenset[str] = frozenset({AGENT_CARD_METHOD, "GetExtendedAgentCard"})
OPERATOR_METHODS: frozenset[str] = TASK_METHODS | CARD_METHODS | {
    "murmur.WatchSession", "murmur.StopSession", "resources/files",
    # Approvals along edges with approve: true (docs/bounds.md).
    "murmur.ApproveTask", "murmur.DenyTask", "murmur.ListApprovals",
}
#: ``GET /metrics`` (docs/metrics.md): the operator's, and a declared credential's that
#: names it; never a formation token's.
METRICS_METHOD = "Metrics"
#: The push notification configuration methods: served at a door whose manifest allows
#: webhooks (docs/push.md), to the operator and to a declared credential that names them.
PUSH_METHODS: frozenset[str] = frozenset({
    "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs", "DeleteTaskPushNotificationConfig",
})
#: Every scope a declared credential may name.
DECLARABLE_SCOPES: frozenset[str] = OPERATOR_METHODS | {METRICS_METHOD} | PUSH_METHODS
#: A2A methods beyond the task methods that a door may refuse (no push notifications
#: where none are allowed): known names, so a refusal may echo them.
REFUSED_METHODS: frozenset[str] = PUSH_METHODS
#: Every method name a door knows: a name outside it is no method at all, which the app
#: answers ``-32601`` to whoever asks (A2A 1.0 section 9.5), not a scope a caller lacks.
KNOWN_METHODS: frozenset[str] = OPERATOR_METHODS | REFUSED_METHODS | {METRICS_METHOD}
#: Exactly the five scopes a formation token carries (the reference's table;
#: docs/door-auth.md).
FORMATION_SCOPES: frozenset[str] = frozenset(
    {"SendMessage", "GetTask", "CancelTask", "ListTasks", "SubscribeToTask"}
)
#: Everything a formation token reaches: its five scopes and the agent card, and nothing
#: else on any binding. Closed: not built from the door's methods, so a method the door
#: serves later is refused to a formation token until it is named here.
FORMATION_REACH: frozenset[str] = FORMATION_SCOPES | {AGENT_CARD_METHOD}


def reach_of(kind: CredentialKind, scopes: frozenset[str]) -> frozenset[str]:
    """The known methods a credential of ``kind`` with ``scopes`` may call: the set
    DoorAuth's scope check looks a method up in.

    The operator reaches every method the door knows; a formation token exactly
    :data:`FORMATION_REACH`, whatever scopes it is given; a declared credential its
    scopes and both cards; the public callers their scopes. A name outside
    :data:`KNOWN_METHODS` is in no reach: DoorAuth lets the app answer it ``-32601``,
    except to a formation token, which is refused anything outside its reach."""
    if kind == "operator":
        return KNOWN_METHODS
    if kind == "member":
        return FORMATION_REACH
    if kind == "public":
        return scopes
    return scopes | CARD_METHODS


@dataclass(frozen=True, slots=True)
class Credential:
    """A credential a door accepted.

    ``name`` is what traces and errors use: ``operator``, ``bearer:ci``, ``jwt:corp``,
    ``member:planner`` or ``public``. ``member`` is the calling member's roster name for
    a formation token, else ``None``. ``owner`` is who owns the tasks the credential
    starts: its ``name`` (the default, given as ``""``), except for a JWT, whose every
    subject is its own owner (``jwt:corp/alice``, docs/door-auth.md). ``reach`` is the
    set of known methods it may call (:func:`reach_of`), worked out here once so that
    the scope check on each request is one set lookup.
    """

    kind: CredentialKind
    name: str
    scopes: frozenset[str]
    member: str | None = None
    owner: str = ""
    reach: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.owner:
            object.__setattr__(self, "owner", self.name)
        object.__setattr__(self, "reach", reach_of(self.kind, self.scopes))


@dataclass(frozen=True, slots=True)
class Caller:
    """The credential of a request plus the origin and trust class derived from it."""

    credential: Credential
    origin: Origin
    trust: Trust


PUBLIC_CALLER = Caller(
    credential=Credential(kind="public", name="public", scopes=OPERATOR_METHODS),
    origin="public",
    trust="untrusted",
)


#: Who asks for the public card at an authenticated door with ``network.public_card``:
#: nobody known, who may read that card and nothing else.
ANONYMOUS_CALLER = Caller(
    credential=Credential(kind="public", name="anonymous", scopes=frozenset({"AgentCard"})),
    origin="public",
    trust="untrusted",
)


def caller_of(scope: Any) -> Caller:
    """The Caller DoorAuth recorded on ``scope``; a door without DoorAuth is public."""
    caller = scope.get(CALLER_SCOPE_KEY)
    return caller if isinstance(caller, Caller) else PUBLIC_CALLER
