"""What a request to a door names: its route, classified once.

DoorAuth classifies each request (:func:`classify`) before it checks the method against
the caller's scopes, and leaves the :class:`Route` on the scope under
:data:`ROUTE_SCOPE_KEY`; the door routes on it and the HTTP+JSON binding serves the
method it names, so no path is matched twice and none can be served as something
DoorAuth did not check it as. In this order, on the path :func:`gateway.protocol.route_path`
gives:

1. a path of slashes alone: JSON-RPC (its method is in the body, which DoorAuth reads,
   then takes the call's route, :func:`rpc_route`);
2. the agent card, ``/healthz``, ``/metrics``: each one route, built once;
3. ``/resources/files`` and below: the session's files;
4. any other path of an HTTP request: the HTTP+JSON binding's
   (:func:`gateway.a2a.rest_routes.match_rest`): the method the verb and path name, the
   verbs the path takes when the verb is not one of them, or nothing (the door's 404).

Standard library and ``gateway`` names only: DoorAuth's hot path imports it.
"""

from __future__ import annotations

from typing import Final

from gateway.a2a.rest_routes import RestRoute, match_rest
from gateway.caller import METRICS_METHOD, OPERATOR_METHODS, REFUSED_METHODS
from gateway.protocol import (
    CARD_PATH,
    FILES_PATH,
    FILES_PREFIX,
    HEALTH_PATH,
    METRICS_PATH,
    route_path,
)
from gateway.types import Scope

__all__ = ["CARD", "FILES", "HEALTH", "METRICS", "REST", "ROUTE_SCOPE_KEY", "RPC", "Route",
           "classify", "rpc_route"]

#: The ASGI scope key under which DoorAuth leaves a request's :class:`Route`.
ROUTE_SCOPE_KEY: Final = "murmur.route"

#: The kinds of route.
RPC: Final = "rpc"
CARD: Final = "card"
HEALTH: Final = "health"
METRICS: Final = "metrics"
FILES: Final = "files"
REST: Final = "rest"


class Route:
    """One request's route: its ``kind``, the ``path`` it was classified on, the
    ``method`` DoorAuth checks against the caller's scopes (``None``: the path names
    none, or, for JSON-RPC, the body does), and for the HTTP+JSON binding the ``rest``
    route matched or the verbs the path ``allowed``. A class with slots: one small
    object per request, and none for the routes built once."""

    __slots__ = ("allowed", "kind", "method", "path", "rest")

    def __init__(self, kind: str, path: str, method: str | None = None,
                 rest: RestRoute | None = None, allowed: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.path = path
        self.method = method
        self.rest = rest
        self.allowed = allowed

    def __repr__(self) -> str:
        return f"Route({self.kind!r}, {self.path!r}, method={self.method!r})"


_RPC_ROUTE: Final = Route(RPC, "/")
_CARD_ROUTE: Final = Route(CARD, CARD_PATH, "AgentCard")
_HEALTH_ROUTE: Final = Route(HEALTH, HEALTH_PATH)
_METRICS_ROUTE: Final = Route(METRICS, METRICS_PATH, METRICS_METHOD)


#: JSON-RPC's routes by the method the body names, built once for the names a door knows
#: (any other name gets a route of its own).
_RPC_ROUTES: Final = {name: Route(RPC, "/", name)
                      for name in (*OPERATOR_METHODS, *REFUSED_METHODS)}


def rpc_route(method: str) -> Route:
    """The route of a JSON-RPC call once its body named ``method``: the request's method
    for the scope check and the metrics, on the scope without a key of its own."""
    route = _RPC_ROUTES.get(method)
    return route if route is not None else Route(RPC, "/", method)


def classify(scope: Scope) -> Route:
    """The route of an HTTP or WebSocket request (see the module text for the order)."""
    path: str = scope["path"]
    if scope.get("root_path") or "//" in path:
        path = route_path(scope)
    if path == "/" or not path.strip("/"):
        return _RPC_ROUTE
    if path == CARD_PATH:
        return _CARD_ROUTE
    if path == HEALTH_PATH:
        return _HEALTH_ROUTE
    if path == METRICS_PATH:
        return _METRICS_ROUTE
    if path == FILES_PATH or path.startswith(FILES_PREFIX):
        return Route(FILES, path, "resources/files")
    if scope["type"] != "http":
        return Route(REST, path)
    match = match_rest(scope["method"], path)
    if match is None:
        return Route(REST, path)
    rest = match.route
    if rest is None:
        return Route(REST, path, allowed=match.allowed)
    return Route(REST, path, rest.method, rest)
