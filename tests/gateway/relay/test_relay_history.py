"""A caller's ``historyLength`` is kept by a gateway door whatever its upstream does with
it: an upstream that answers every request with the whole history (fasta2a does, and
every a2a-sdk 0.3 server for 0), behind the door, gives each caller at most the last
``historyLength`` messages, and none for 0 (docs/gateway.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.door import rpc, send_params, serve
from tests.support.upstream import CARD_PATH, Recorder, gateway_formation

HISTORY = [{"messageId": f"m{i}", "role": "ROLE_USER" if i % 2 == 0 else "ROLE_AGENT",
            "parts": [{"text": f"message {i}"}]} for i in range(4)]


def whole_history_upstream(port_holder: dict[str, int]) -> Starlette:
    """A 1.0 JSON-RPC upstream that ignores historyLength: every task it returns carries
    all four messages."""
    task = {"id": "t-1", "contextId": "c-1", "history": HISTORY,
            "status": {"state": "TASK_STATE_COMPLETED"}}

    async def card(_: Request) -> JSONResponse:
        return JSONResponse({
            "name": "whole-history", "description": "ignores historyLength",
            "version": "1.0.0", "capabilities": {}, "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"], "skills": [],
            "supportedInterfaces": [{"url": f"http://127.0.0.1:{port_holder['port']}/",
                                     "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]})

    async def jsonrpc(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        result: Any = {"task": task} if body["method"] == "SendMessage" else task
        return JSONResponse({"jsonrpc": "2.0", "id": body["id"], "result": result})

    return Starlette(routes=[Route(CARD_PATH, card), Route("/", jsonrpc, methods=["POST"])])


@pytest.mark.parametrize(("length", "kept"), [(0, None), (1, ["m3"]), (3, ["m1", "m2", "m3"]),
                                              (10, ["m0", "m1", "m2", "m3"]),
                                              (None, ["m0", "m1", "m2", "m3"])])
async def test_each_answer_keeps_at_most_the_callers_history_length(
        length: int | None, kept: list[str] | None) -> None:
    port: dict[str, int] = {}
    recorder = Recorder(whole_history_upstream(port))
    async with serve(recorder) as url:
        port["port"] = int(url.rsplit(":", 1)[1])
        formation = await gateway_formation(url, recorder)
        try:
            async with formation.client(formation.planner) as client:
                configuration = {} if length is None else {"historyLength": length}
                sent = await rpc(client, "SendMessage",
                                 {**send_params("hi"), "configuration": configuration})
                got = await rpc(client, "GetTask", {"id": "t-1"} if length is None
                                else {"id": "t-1", "historyLength": length})
                listed = await rpc(client, "ListTasks", {} if length is None
                                   else {"historyLength": length})
        finally:
            await formation.door.aclose()
    for task in (sent["result"]["task"], got["result"], listed["result"]["tasks"][0]):
        ids = [message["messageId"] for message in task["history"]] \
            if "history" in task else None
        assert ids == kept
