"""The fake door of tests/support/proxy_fakes.py answers as A2A 1.0 says, so the proxy and
call-member tests' assertions rest on something checked."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support.proxy_fakes import FakeDoor, forever


async def test_fake_door_speaks_a2a_send_get_cancel_and_busy() -> None:
    door = FakeDoor(holds=1, work=forever)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=door),
                                 base_url="http://door") as client:
        def call(method: str, params: dict[str, Any]) -> Any:
            return client.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                          "params": params})
        message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
        first = (await call("SendMessage", {"message": message})).json()
        task_id = first["result"]["task"]["id"]
        busy = (await call("SendMessage", {"message": message})).json()
        assert busy["error"]["code"] == -32050
        assert busy["error"]["data"][0]["metadata"] == {"retryAfterMs": "20"}
        await asyncio.sleep(0)
        got = (await call("GetTask", {"id": task_id})).json()
        assert got["result"]["status"]["state"] == "TASK_STATE_WORKING"
        canceled = (await call("CancelTask", {"id": task_id})).json()
        assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        assert (await call("GetTask", {"id": "nope"})).json()["error"]["code"] == -32001
