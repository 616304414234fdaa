"""The A2A methods once, binding-neutral: what a door does for each method, whichever
binding (JSON-RPC, HTTP+JSON, and later gRPC) framed the request.

A binding parses its framing, checks the A2A version, takes the caller DoorAuth left,
and then, in this order:

1. asks :meth:`A2AMethods.handlers` for the method's handler: ``(unary, None)`` or
   ``(None, streaming)``, or the refusal of a method this door does not serve
   (``-32601``; the push configuration methods' ``-32003``, so every binding refuses
   them alike);
2. validates nothing itself: each handler validates its own parameters
   (:func:`validate_params`, ``-32602`` naming the field); a message's parts are checked
   against the media types the door's card accepts here too, once for every binding and
   both kinds of door (:func:`send_message_request`, ``-32005``);
3. for a stream, opens it with :meth:`A2AMethods.open_stream`: its place in the door's
   stream bounds first (``-32050`` past them, before anything starts), then the
   method's events, which the binding frames and sends.

:class:`A2AMethods` holds the table and the session's own two methods
(``murmur.StopSession``, ``murmur.WatchSession``); a subclass fills the A2A methods for
one kind of tasks: :class:`gateway.door.local_methods.LocalMethods` (the agent runs
here) or the relay's :class:`gateway.relay.tasks.RelayMethods`. The door builds its
bindings over the one instance its tasks side gives it, and hands it its card
(:meth:`A2AMethods.use_card`): the media types SendMessage takes, and the extended card
``GetExtendedAgentCard`` answers with (docs/door.md, "The extended agent card").
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.a2a.jsonrpc import RpcError, invalid_params
from gateway.a2a.models import (
    PART_CONTENT,
    GetExtendedAgentCardRequest,
    Message,
    SendMessageRequest,
)
from gateway.caller import PUSH_METHODS, Caller
from gateway.door.approvals import Approvals
from gateway.door.media_types import ANY_MODE, AcceptedModes, part_media_type
from gateway.door.streams import StreamBook, StreamTicket
from gateway.door.tasks import acts_as_operator
from gateway.trace.bus import TraceBus

__all__ = ["A2AMethods", "ExtendedCard", "Streaming", "Unary", "send_message_request",
           "validate_params"]

Unary = Callable[[dict[str, Any], Caller], Awaitable[Any]]
Streaming = Callable[[dict[str, Any], Caller], Awaitable[AsyncIterator[Any]]]
#: The door's extended agent card for the request being served (the card naming the
#: address the caller reached), or None when its card declares none.
ExtendedCard = Callable[[], dict[str, Any] | None]
#: How long a media type a caller sent may be echoed in a refusal.
_ECHO_LIMIT = 64
#: What the ``-32005`` refusal says sets the modes a door takes.
_MODES_FIX = ("agent.input_modes in the member's murmur.yaml sets them, in place of a "
              "gateway member's upstream card's")

M = TypeVar("M", bound=BaseModel)


def validate_params(model: type[M], params: dict[str, Any]) -> M:
    """``params`` as ``model``, or ``-32602`` naming each field at fault."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise invalid_params(exc) from exc


def send_message_request(params: dict[str, Any], accepted: AcceptedModes = ANY_MODE, *,
                         push: bool = False) -> SendMessageRequest:
    """A SendMessage's params validated (``-32602`` naming the field), a push
    configuration refused (``-32003``) unless the door sends push notifications
    (``push``), then a part of a media type outside ``accepted`` (``-32005`` naming the
    part; gateway/door/media_types.py): the same for a local door and a relay, before
    anything runs or is forwarded."""
    request = validate_params(SendMessageRequest, params)
    configuration = request.configuration
    if configuration is not None and configuration.task_push_notification_config and not push:
        raise RpcError("PUSH_NOTIFICATION_NOT_SUPPORTED",
                       "this door sends no push notifications; follow the task with "
                       "SubscribeToTask or GetTask")
    if accepted.enforced:
        _check_media_types(request.message, accepted)
    return request


def _check_media_types(message: Message, accepted: AcceptedModes) -> None:
    """``-32005`` for the first part whose media type the door's card does not accept."""
    refused = accepted.refused(
        part_media_type(next(kind for kind in PART_CONTENT if kind in part.model_fields_set),
                        part.media_type)
        for part in message.parts)
    if refused is None:
        return
    index, media_type = refused
    shown = media_type if len(media_type) <= _ECHO_LIMIT else media_type[:_ECHO_LIMIT] + "..."
    takes = ", ".join(accepted.listed)
    # The key that fixes it is named: a gateway member's modes are its upstream card's,
    # which can misstate what the agent takes (fasta2a's always says application/json).
    raise RpcError("CONTENT_TYPE_NOT_SUPPORTED",
                   f"message.parts[{index}] is {shown}; this agent takes {takes} "
                   f"(its card's defaultInputModes; {_MODES_FIX})",
                   metadata={"mediaType": shown, "supportedMediaTypes": takes})


class A2AMethods(ABC):
    """The methods of one door, by name (see the module text): the six A2A methods a
    subclass implements, and the session's two. ``stop`` is how ``murmur.StopSession``
    asks the session to end; ``streams`` bounds the door's live streams on every binding
    (:mod:`gateway.door.streams`)."""

    def __init__(self, trace: TraceBus, *, stop: Callable[[str], None],
                 streams: StreamBook | None = None) -> None:
        self._trace = trace
        self._stop = stop
        #: The bounds on this door's live streams, on every binding.
        self.streams = streams if streams is not None else StreamBook()
        #: The media types SendMessage takes (every one until the door hands its card).
        self.accepted: AcceptedModes = ANY_MODE
        self._extended_card: ExtendedCard = _no_extended_card
        self._unary: dict[str, Unary] = {
            "SendMessage": self.send_message,
            "GetTask": self.get_task,
            "CancelTask": self.cancel_task,
            "ListTasks": self.list_tasks,
            "GetExtendedAgentCard": self.get_extended_agent_card,
            "murmur.StopSession": self.stop_session,
            "murmur.ApproveTask": self.approve_task,
            "murmur.DenyTask": self.deny_task,
            "murmur.ListApprovals": self.list_approvals,
        }
        self._streaming: dict[str, Streaming] = {
            "SendStreamingMessage": self.send_streaming_message,
            "SubscribeToTask": self.subscribe_to_task,
            "murmur.WatchSession": self.watch_session,
        }

    def use_card(self, accepted: AcceptedModes, extended: ExtendedCard) -> None:
        """What the door's card says (the door calls this once it has its card): the
        media types SendMessage takes, and where ``GetExtendedAgentCard`` reads the
        extended card from."""
        self.accepted = accepted
        self._extended_card = extended

    def handlers(self, method: str) -> tuple[Unary | None, Streaming | None]:
        """The handler of ``method``: (unary, None) or (None, streaming); the refusal of a
        method this door does not serve (``-32601``, or the push methods' own code).
        Every binding dispatches through this, so each method has one implementation."""
        unary = self._unary.get(method)
        if unary is not None:
            return unary, None
        streaming = self._streaming.get(method)
        if streaming is None:
            raise _unknown_method(method)
        return None, streaming

    async def open_stream(self, method: str, params: dict[str, Any], caller: Caller,
                          streaming: Streaming) -> tuple[AsyncIterator[Any], StreamTicket]:
        """A stream's place in the bounds first (a refusal raises before anything is
        started), then the method's events. The binding sends them and releases the
        ticket when the stream ends."""
        ticket = self.streams.admit(caller.credential.owner, _followed_task(method, params))
        try:
            return await streaming(params, caller), ticket
        except BaseException:
            ticket.release()
            raise

    # --- the A2A methods, each kind of tasks its own ----------------------------------

    @abstractmethod
    async def send_message(self, params: dict[str, Any], caller: Caller) -> Any: ...

    @abstractmethod
    async def send_streaming_message(self, params: dict[str, Any],
                                     caller: Caller) -> AsyncIterator[Any]: ...

    @abstractmethod
    async def get_task(self, params: dict[str, Any], caller: Caller) -> Any: ...

    @abstractmethod
    async def cancel_task(self, params: dict[str, Any], caller: Caller) -> Any: ...

    @abstractmethod
    async def list_tasks(self, params: dict[str, Any], caller: Caller) -> Any: ...

    @abstractmethod
    async def subscribe_to_task(self, params: dict[str, Any],
                                caller: Caller) -> AsyncIterator[Any]: ...

    # --- the card ----------------------------------------------------------------------

    async def get_extended_agent_card(self, params: dict[str, Any],
                                      caller: Caller) -> dict[str, Any]:
        """``GetExtendedAgentCard``: the card with ``agent.extended_skills`` after its
        skills, to a caller DoorAuth authenticated (it refuses everyone else with its 401
        first). A card that declares no extended card (no extended skills, or a public
        door, which authenticates nobody) is ``-32004``, as A2A 1.0 section 3.3.4 says
        for ``capabilities.extendedAgentCard: false``."""
        card = self._extended_card() if caller.credential.kind != "public" else None
        if card is None:
            raise RpcError("UNSUPPORTED_OPERATION",
                           "this door has no extended agent card "
                           "(capabilities.extendedAgentCard is false)")
        validate_params(GetExtendedAgentCardRequest, params)
        return card

    # --- murmur methods ----------------------------------------------------------------

    async def stop_session(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        _operator_only(caller, "murmur.StopSession")
        # After this answer is on its way: the runtime may start ending at once.
        asyncio.get_running_loop().call_soon(self._stop, "stop_session")
        return {"stopping": True}

    async def approve_task(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        """``murmur.ApproveTask {id}``: a task waiting for the operator runs."""
        _operator_only(caller, "murmur.ApproveTask")
        record = self._approvals().approve(_approval_id(params), "operator")
        return record.snapshot(0)

    async def deny_task(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        """``murmur.DenyTask {id, reason}``: a task waiting for the operator is rejected."""
        _operator_only(caller, "murmur.DenyTask")
        reason = params.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise RpcError("INVALID_PARAMS", "reason: text, when given")
        record = self._approvals().deny(_approval_id(params), "operator",
                                        reason.strip()[:1000] if reason else None)
        return record.snapshot(0)

    async def list_approvals(self, params: dict[str, Any], caller: Caller) -> dict[str, Any]:
        """``murmur.ListApprovals``: the tasks waiting for the operator here."""
        _operator_only(caller, "murmur.ListApprovals")
        return {"approvals": self._approvals().pending()}

    def _approvals(self) -> Approvals:
        """The door's waiting tasks; a door whose tasks are not its own (a gateway
        member's) holds none."""
        raise RpcError("UNSUPPORTED_OPERATION", "this door holds no task for approval "
                                                "(a gateway member's tasks are its upstream's)")

    async def watch_session(self, params: dict[str, Any],
                            caller: Caller) -> AsyncIterator[dict[str, Any]]:
        _operator_only(caller, "murmur.WatchSession")
        return self._trace_records()

    async def _trace_records(self) -> AsyncIterator[dict[str, Any]]:
        subscription = self._trace.subscribe()
        try:
            async for record in subscription:
                yield record
        finally:
            subscription.close()


def _operator_only(caller: Caller, method: str) -> None:
    if not acts_as_operator(caller):
        raise RpcError("METHOD_NOT_FOUND", f"{method} is served to the session's operator only")


def _approval_id(params: dict[str, Any]) -> str:
    task_id = params.get("id")
    if not isinstance(task_id, str) or not task_id or len(task_id) > 256:
        raise RpcError("INVALID_PARAMS", "id: the id of a task waiting for approval")
    return task_id


def _unknown_method(method: str) -> RpcError:
    if method in PUSH_METHODS:
        return RpcError("PUSH_NOTIFICATION_NOT_SUPPORTED",
                        "this door sends no push notifications (capabilities.pushNotifications "
                        "is false: its manifest allows no webhook in network.push.allow)")
    return RpcError("METHOD_NOT_FOUND", f"no method {method[:64]!r} here")


def _no_extended_card() -> dict[str, Any] | None:
    return None


def _followed_task(method: str, params: dict[str, Any]) -> str | None:
    """The task a stream follows, when the request names it: SubscribeToTask's ``id``,
    a SendStreamingMessage's ``message.taskId`` (a new task has none yet)."""
    if method == "SubscribeToTask":
        task_id = params.get("id")
    else:
        message = params.get("message")
        task_id = message.get("taskId") if isinstance(message, dict) else None
    return task_id if isinstance(task_id, str) and task_id else None
