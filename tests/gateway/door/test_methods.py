"""gateway/door/methods.py: the A2A methods once, whichever binding framed the call: the
one table, the refusals of what no door serves, the extended card and the media types the
door hands them, and a stream's place in the bounds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.a2a.jsonrpc import RpcError
from gateway.a2a.models import ListTasksRequest
from gateway.door.local_methods import LocalMethods
from gateway.door.media_types import ANY_MODE, AcceptedModes
from gateway.door.streams import StreamBook
from gateway.door.tasks import GateConfig, TaskRun, TaskStore
from gateway.trace.bus import TraceBus
from tests.support.door import OPERATOR, PUBLIC


async def answer(task: TaskRun) -> str:
    return "ok"


def methods(streams: StreamBook | None = None) -> LocalMethods:
    return LocalMethods(TaskStore(answer, GateConfig(), TraceBus()), TraceBus(),
                        stop=lambda reason: None, streams=streams)


def test_every_a2a_method_and_the_sessions_two_have_one_handler() -> None:
    table = methods()
    for name in ("SendMessage", "GetTask", "CancelTask", "ListTasks", "murmur.StopSession"):
        unary, streaming = table.handlers(name)
        assert unary is not None and streaming is None, name
    for name in ("SendStreamingMessage", "SubscribeToTask", "murmur.WatchSession"):
        unary, streaming = table.handlers(name)
        assert unary is None and streaming is not None, name


@pytest.mark.parametrize(("name", "code"), [
    ("CreateTaskPushNotificationConfig", -32003),
    ("tasks/get", -32601),
])
def test_what_no_door_serves_is_refused_alike_on_every_binding(name: str, code: int) -> None:
    with pytest.raises(RpcError) as refused:
        methods().handlers(name)
    assert refused.value.code == code


async def test_the_extended_card_is_the_one_the_door_hands_and_unsupported_without_one(
        ) -> None:
    table = methods()
    unary, _ = table.handlers("GetExtendedAgentCard")
    assert unary is not None
    with pytest.raises(RpcError) as refused:
        await unary({}, OPERATOR)
    assert refused.value.code == -32004, "no card handed: capabilities.extendedAgentCard false"
    table.use_card(ANY_MODE, lambda: {"name": "coder", "skills": []})
    assert await unary({"tenant": "acme"}, OPERATOR) == {"name": "coder", "skills": []}
    with pytest.raises(RpcError) as public:
        await unary({}, PUBLIC)
    assert public.value.code == -32004, "a caller nobody authenticated never gets it"
    with pytest.raises(RpcError) as bad:
        await unary({"tenant": 5}, OPERATOR)
    assert bad.value.code == -32602 and "tenant" in bad.value.message


async def test_send_message_checks_the_parts_against_the_modes_the_card_accepts() -> None:
    table = methods()
    table.use_card(AcceptedModes(["text/plain"]), lambda: None)
    image = {"message": {"messageId": "m-1", "role": "ROLE_USER",
                         "parts": [{"text": "look"}, {"raw": "aGk=", "mediaType": "image/png"}]}}
    with pytest.raises(RpcError) as refused:
        await table.send_message(image, OPERATOR)
    assert refused.value.code == -32005
    assert "message.parts[1] is image/png" in refused.value.message
    assert refused.value.metadata == {"mediaType": "image/png",
                                      "supportedMediaTypes": "text/plain"}
    assert table._store.list_tasks(OPERATOR, ListTasksRequest())["totalSize"] == 0


async def test_a_stream_that_fails_to_open_gives_its_place_back() -> None:
    book = StreamBook(per_owner=1, per_task=1, total=8)
    table = methods(book)

    async def failing(params: dict[str, Any], caller: Any) -> AsyncIterator[Any]:
        raise RpcError("TASK_NOT_FOUND")

    with pytest.raises(RpcError):
        await table.open_stream("SubscribeToTask", {"id": "t-1"}, OPERATOR, failing)
    assert len(book) == 0

    async def events(params: dict[str, Any], caller: Any) -> AsyncIterator[Any]:
        async def one() -> AsyncIterator[Any]:
            yield {"task": {}}
        return one()

    _, ticket = await table.open_stream("SubscribeToTask", {"id": "t-1"}, OPERATOR, events)
    assert len(book) == 1
    with pytest.raises(RpcError) as refused:
        await table.open_stream("SubscribeToTask", {"id": "t-2"}, OPERATOR, events)
    assert refused.value.code == -32050, "one stream per credential in this book"
    ticket.release()
    assert len(book) == 0
