"""The HTTP+JSON binding's routes: which A2A method a verb and a path name.

One function, :func:`match_rest`, called once per request by
:func:`gateway.routes.classify`: DoorAuth checks the method it names against the
caller's scopes and the REST endpoint serves that same route, so no path can be served
as something DoorAuth did not check it as. Standard library only: DoorAuth's hot path imports it.

The paths are A2A 1.0's (section 11.3), each also under one ``/{tenant}`` segment:

=======================================  ==================================
``POST /message:send``                   ``SendMessage``
``POST /message:stream``                 ``SendStreamingMessage`` (SSE)
``GET /tasks/{id}``                      ``GetTask``
``GET /tasks``                           ``ListTasks``
``POST /tasks/{id}:cancel``              ``CancelTask``
``GET|POST /tasks/{id}:subscribe``       ``SubscribeToTask`` (SSE)
``POST|GET /tasks/{id}/pushNotificationConfigs``, ``GET|DELETE .../{configId}``
                                         the push configuration methods (refused)
``GET /extendedAgentCard``               ``GetExtendedAgentCard``
=======================================  ==================================

Matching reads the path DoorAuth routes on (:func:`gateway.protocol.route_path`): first
without a tenant, then with its first segment as the tenant. A path that names a
resource with a verb it does not take is told apart (:attr:`RestMatch.allowed`) so the
door can answer ``405`` with ``Allow``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: Methods whose answer is a stream of Server-Sent Events.
STREAMING_METHODS: Final = frozenset({"SendStreamingMessage", "SubscribeToTask"})

_TASK_ACTIONS: Final = {"cancel": {"POST": "CancelTask"},
                        "subscribe": {"GET": "SubscribeToTask", "POST": "SubscribeToTask"}}
_CONFIGS: Final = "pushNotificationConfigs"


@dataclass(frozen=True, slots=True)
class RestRoute:
    """A matched request: the A2A ``method``, the task id and push config id the path
    names, and the tenant segment when there was one."""

    method: str
    task_id: str | None = None
    config_id: str | None = None
    tenant: str | None = None

    @property
    def streaming(self) -> bool:
        return self.method in STREAMING_METHODS


@dataclass(frozen=True, slots=True)
class RestMatch:
    """What a path is: ``route`` when the verb fits, else the verbs it ``allowed``."""

    route: RestRoute | None
    allowed: tuple[str, ...] = ()


def match_rest(verb: str, path: str) -> RestMatch | None:
    """The route ``verb path`` names, or None when the path is none of the binding's."""
    if path.endswith("/") and len(path) > 1:
        path = path[:-1]
    segments = path[1:].split("/") if path.startswith("/") else []
    found = _match(verb, segments, None)
    if found is None and len(segments) > 1 and segments[0]:
        found = _match(verb, segments[1:], segments[0])
    return found


def _match(verb: str, segments: list[str], tenant: str | None) -> RestMatch | None:
    verbs = _verbs(segments)
    if verbs is None:
        return None
    table, task_id, config_id = verbs
    method = table.get(verb)
    if method is None:
        return RestMatch(None, tuple(table))
    return RestMatch(RestRoute(method, task_id, config_id, tenant))


def _verbs(segments: list[str]) -> tuple[dict[str, str], str | None, str | None] | None:
    """The verbs a path takes, each with its method, and the ids it names."""
    count = len(segments)
    head = segments[0] if count else ""
    if count == 1:
        if head == "message:send":
            return {"POST": "SendMessage"}, None, None
        if head == "message:stream":
            return {"POST": "SendStreamingMessage"}, None, None
        if head == "tasks":
            return {"GET": "ListTasks"}, None, None
        if head == "extendedAgentCard":
            return {"GET": "GetExtendedAgentCard"}, None, None
        return None
    if head != "tasks" or not segments[1]:
        return None
    task = segments[1]
    if count == 2:
        name, colon, action = task.rpartition(":")
        if colon and name and action in _TASK_ACTIONS:
            return _TASK_ACTIONS[action], name, None
        return {"GET": "GetTask"}, task, None
    if segments[2] != _CONFIGS or count > 4:
        return None
    if count == 3:
        return ({"POST": "CreateTaskPushNotificationConfig",
                 "GET": "ListTaskPushNotificationConfigs"}, task, None)
    if not segments[3]:
        return None
    return ({"GET": "GetTaskPushNotificationConfig",
             "DELETE": "DeleteTaskPushNotificationConfig"}, task, segments[3])
