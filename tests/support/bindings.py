"""Helpers for the tests that run one scenario on both A2A bindings of a door (no tests
here): a JSON-RPC and an HTTP+JSON adapter with one small API, each call's answer
normalised to an :data:`Outcome` (the result, or the ErrorInfo reason of an error, or
``"<status> <code>"`` for a DoorAuth refusal), a scriptable agent, a door with the real
DoorAuth and every kind of credential, and :func:`scrub`, which takes the ids and times
out of a transcript so two bindings' transcripts can be compared whole.

Each adapter checks its binding's framing as it normalises: a JSON-RPC answer is HTTP 200
with the request's id and an error code that is the reason's row of the error table; an
HTTP+JSON error is a ``google.rpc.Status`` whose HTTP status, ``code`` and ``status`` are
that row's, and a stream's ``data`` is a bare StreamResponse (no JSON-RPC wrapper)."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode

import httpx

from gateway.a2a.jsonrpc import ERROR_BY_REASON, ERROR_INFO_TYPE
from gateway.auth.credentials import DeclaredBearer, OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationVerifier
from gateway.door.app import OPERATOR_CALLER, Door, DoorSettings, build_door
from gateway.door.card import CardInfo
from gateway.door.task_record import message_text
from gateway.door.tasks import GateConfig, TaskRun
from gateway.protocol import TERMINAL_STATES
from tests.support.auth import CI_TOKEN, FORMATION, KEY, mint
from tests.support.door import BASE_URL, card_info

#: The result of a call, or the ErrorInfo reason of its error, or "<status> <code>" for
#: a refusal of DoorAuth (which keeps its own body on both bindings).
Outcome = dict[str, Any] | str
#: A stream's events (each a StreamResponse, or the reason of an ``event: error``), or
#: the outcome of a request refused before the stream opened.
Events = list[Outcome] | str

T = TypeVar("T")
VERSION = {"A2A-Version": "1.0"}
JSON_TYPE = {"Content-Type": "application/json"}
#: DoorAuth's refusals: their status, and a body {"error": <code>, "message": ...}.
AUTH_STATUSES = frozenset({401, 403, 413, 421})


def reason_in(details: list[dict[str, Any]]) -> str:
    """The ErrorInfo reason among an error's details (JSON-RPC ``data`` or Status
    ``details``)."""
    infos = [detail for detail in details if detail.get("@type") == ERROR_INFO_TYPE]
    assert len(infos) == 1, details
    return str(infos[0]["reason"])


def _auth_refusal(response: httpx.Response) -> str | None:
    if response.status_code not in AUTH_STATUSES:
        return None
    body = response.json()
    assert isinstance(body.get("error"), str) and isinstance(body.get("message"), str), body
    return f"{response.status_code} {body['error']}"


def sse_events(text: str) -> list[tuple[str | None, str]]:
    """The events of an SSE body: (event name or None, data), comments skipped."""
    events: list[tuple[str | None, str]] = []
    for block in text.split("\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
            else:
                raise AssertionError(f"not an SSE line: {line!r}")
        if data:
            events.append((name, "\n".join(data)))
        else:
            assert name is None, f"an event without data: {block!r}"
    return events


def is_stream(response: httpx.Response) -> bool:
    return bool(response.headers.get("content-type", "").startswith("text/event-stream"))


class Binding:
    """One binding's client for a door. Every call's outcome is kept in ``log`` (unless
    ``record=False``), in order, for comparing two bindings' transcripts."""

    name = ""

    def __init__(self, client: httpx.AsyncClient, headers: dict[str, str] | None = None,
                 log: list[Any] | None = None) -> None:
        self.client = client
        self.headers = dict(VERSION if headers is None else headers)
        self.log: list[Any] = [] if log is None else log

    def with_headers(self, **headers: str) -> Binding:
        """The same binding with these headers on every request (sharing the log)."""
        return type(self)(self.client, {**self.headers, **headers}, self.log)

    def versionless(self) -> Binding:
        """The same binding sending no A2A-Version at all (sharing the log)."""
        headers = {k: v for k, v in self.headers.items() if k.lower() != "a2a-version"}
        return type(self)(self.client, headers, self.log)

    def _keep(self, outcome: T, record: bool) -> T:
        if record:
            self.log.append(outcome)
        return outcome

    # --- the API every scenario uses ----------------------------------------------------

    async def send(self, text: str, *, immediately: bool = False, task_id: str | None = None,
                   record: bool = True, **configuration: Any) -> Outcome:
        params = send_params(text, immediately=immediately, task_id=task_id, **configuration)
        return await self.send_raw(params, record=record)

    async def send_raw(self, params: dict[str, Any], *, record: bool = True) -> Outcome:
        raise NotImplementedError

    async def get(self, task_id: str, history: int | None = None, *,
                  record: bool = True) -> Outcome:
        raise NotImplementedError

    async def list(self, page_size: int | None = None, page_token: str | None = None, *,
                   record: bool = True, **filters: Any) -> Outcome:
        raise NotImplementedError

    async def cancel(self, task_id: str, *, record: bool = True) -> Outcome:
        raise NotImplementedError

    async def subscribe(self, task_id: str, *, record: bool = True) -> Events:
        raise NotImplementedError

    async def stream(self, text: str, *, task_id: str | None = None,
                     record: bool = True) -> Events:
        raise NotImplementedError

    async def create_push_config(self, task_id: str, *, record: bool = True) -> Outcome:
        raise NotImplementedError

    async def get_push_config(self, task_id: str, config_id: str, *,
                              record: bool = True) -> Outcome:
        raise NotImplementedError

    async def until_done(self, task_id: str, *, record: bool = True) -> Outcome:
        """GetTask until the task has ended (the polls in between are not logged)."""
        async with asyncio.timeout(5):
            while True:
                task = await self.get(task_id, record=False)
                if isinstance(task, str) or task["status"]["state"] in TERMINAL_STATES:
                    return self._keep(task, record)
                await asyncio.sleep(0.005)


def send_params(text: str, *, immediately: bool = False, task_id: str | None = None,
                **configuration: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                               "parts": [{"text": text}]}
    if task_id is not None:
        message["taskId"] = task_id
    params: dict[str, Any] = {"message": message}
    if immediately:
        configuration["returnImmediately"] = True
    if configuration:
        params["configuration"] = configuration
    return params


_REQUEST_IDS = itertools.count(1)


class JsonRpc(Binding):
    """``POST /`` with one JSON-RPC request; streams framed as JSON-RPC responses."""

    name = "JSON-RPC"

    async def _post(self, method: str, params: dict[str, Any]) -> tuple[int, httpx.Response]:
        request_id = next(_REQUEST_IDS)
        response = await self.client.post(
            "/", json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params},
            headers=self.headers)
        return request_id, response

    async def call(self, method: str, params: dict[str, Any], *,
                   record: bool = True) -> Outcome:
        request_id, response = await self._post(method, params)
        return self._keep(self._unary(request_id, response), record)

    async def call_stream(self, method: str, params: dict[str, Any], *,
                          record: bool = True) -> Events:
        request_id, response = await self._post(method, params)
        if not is_stream(response):
            refusal = self._unary(request_id, response)
            assert isinstance(refusal, str), "a stream's answer is SSE or an error"
            return self._keep(refusal, record)
        events: list[Outcome] = []
        for name, data in sse_events(response.text):
            document = json.loads(data)
            assert document["jsonrpc"] == "2.0" and document["id"] == request_id, document
            if name == "error":
                events.append(self._error(document["error"]))
            else:
                assert name is None, name
                events.append(document["result"])
        return self._keep(events, record)

    def _unary(self, request_id: int, response: httpx.Response) -> Outcome:
        refused = _auth_refusal(response)
        if refused is not None:
            return refused
        assert response.status_code == 200, response.text
        document = response.json()
        assert document["jsonrpc"] == "2.0", document
        if "error" in document:
            assert document["id"] in (request_id, None), document
            return self._error(document["error"])
        assert document["id"] == request_id, document
        result: dict[str, Any] = document["result"]
        return result

    @staticmethod
    def _error(error: dict[str, Any]) -> str:
        reason = reason_in(error["data"])
        assert ERROR_BY_REASON[reason].code == error["code"], error
        return reason

    async def send_raw(self, params: dict[str, Any], *, record: bool = True) -> Outcome:
        return await self.call("SendMessage", params, record=record)

    async def get(self, task_id: str, history: int | None = None, *,
                  record: bool = True) -> Outcome:
        params: dict[str, Any] = {"id": task_id}
        if history is not None:
            params["historyLength"] = history
        return await self.call("GetTask", params, record=record)

    async def list(self, page_size: int | None = None, page_token: str | None = None, *,
                   record: bool = True, **filters: Any) -> Outcome:
        params = dict(filters)
        if page_size is not None:
            params["pageSize"] = page_size
        if page_token is not None:
            params["pageToken"] = page_token
        return await self.call("ListTasks", params, record=record)

    async def cancel(self, task_id: str, *, record: bool = True) -> Outcome:
        return await self.call("CancelTask", {"id": task_id}, record=record)

    async def subscribe(self, task_id: str, *, record: bool = True) -> Events:
        return await self.call_stream("SubscribeToTask", {"id": task_id}, record=record)

    async def stream(self, text: str, *, task_id: str | None = None,
                     record: bool = True) -> Events:
        return await self.call_stream("SendStreamingMessage",
                                      send_params(text, task_id=task_id), record=record)

    async def create_push_config(self, task_id: str, *, record: bool = True) -> Outcome:
        return await self.call("CreateTaskPushNotificationConfig", {
            "taskId": task_id, "url": "https://hook.example/a2a"}, record=record)

    async def get_push_config(self, task_id: str, config_id: str, *,
                              record: bool = True) -> Outcome:
        return await self.call("GetTaskPushNotificationConfig",
                               {"taskId": task_id, "id": config_id}, record=record)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class HttpJson(Binding):
    """The HTTP+JSON paths; streams whose ``data`` is each StreamResponse."""

    name = "HTTP+JSON"

    async def request(self, verb: str, path: str, body: dict[str, Any] | None = None,
                      query: dict[str, Any] | None = None) -> httpx.Response:
        if query:
            path += "?" + urlencode({k: _query_value(v) for k, v in query.items()})
        if body is None:
            return await self.client.request(verb, path, headers=self.headers)
        return await self.client.request(verb, path, headers={**self.headers, **JSON_TYPE},
                                         content=json.dumps(body).encode())

    async def call(self, verb: str, path: str, body: dict[str, Any] | None = None,
                   query: dict[str, Any] | None = None, *, record: bool = True) -> Outcome:
        return self._keep(self.unary(await self.request(verb, path, body, query)), record)

    async def call_stream(self, verb: str, path: str, body: dict[str, Any] | None = None, *,
                          record: bool = True) -> Events:
        response = await self.request(verb, path, body)
        if not is_stream(response):
            refusal = self.unary(response)
            assert isinstance(refusal, str), "a stream's answer is SSE or an error"
            return self._keep(refusal, record)
        assert response.status_code == 200
        events: list[Outcome] = []
        for name, data in sse_events(response.text):
            document = json.loads(data)
            assert "jsonrpc" not in document and "result" not in document, document
            if name == "error":
                events.append(status_reason(document))
            else:
                assert name is None, name
                events.append(document)
        return self._keep(events, record)

    @staticmethod
    def unary(response: httpx.Response) -> Outcome:
        refused = _auth_refusal(response)
        if refused is not None:
            return refused
        if response.status_code == 200:
            assert response.headers["content-type"] == "application/a2a+json"
            result: dict[str, Any] = response.json()
            return result
        reason = status_reason(response.json())
        assert response.status_code == ERROR_BY_REASON[reason].http, response.text
        return reason

    async def send_raw(self, params: dict[str, Any], *, record: bool = True) -> Outcome:
        return await self.call("POST", "/message:send", params, record=record)

    async def get(self, task_id: str, history: int | None = None, *,
                  record: bool = True) -> Outcome:
        query = None if history is None else {"historyLength": history}
        return await self.call("GET", f"/tasks/{task_id}", None, query, record=record)

    async def list(self, page_size: int | None = None, page_token: str | None = None, *,
                   record: bool = True, **filters: Any) -> Outcome:
        query = dict(filters)
        if page_size is not None:
            query["pageSize"] = page_size
        if page_token is not None:
            query["pageToken"] = page_token
        return await self.call("GET", "/tasks", None, query, record=record)

    async def cancel(self, task_id: str, *, record: bool = True) -> Outcome:
        return await self.call("POST", f"/tasks/{task_id}:cancel", record=record)

    async def subscribe(self, task_id: str, *, record: bool = True) -> Events:
        return await self.call_stream("GET", f"/tasks/{task_id}:subscribe", record=record)

    async def stream(self, text: str, *, task_id: str | None = None,
                     record: bool = True) -> Events:
        return await self.call_stream("POST", "/message:stream",
                                      send_params(text, task_id=task_id), record=record)

    async def create_push_config(self, task_id: str, *, record: bool = True) -> Outcome:
        return await self.call("POST", f"/tasks/{task_id}/pushNotificationConfigs",
                               {"url": "https://hook.example/a2a"}, record=record)

    async def get_push_config(self, task_id: str, config_id: str, *,
                              record: bool = True) -> Outcome:
        return await self.call("GET", f"/tasks/{task_id}/pushNotificationConfigs/{config_id}",
                               record=record)


def status_reason(document: dict[str, Any]) -> str:
    """The reason of a ``google.rpc.Status`` document, its shape checked against the
    reason's row of the error table."""
    error = document["error"]
    assert set(error) == {"code", "status", "message", "details"}, error
    reason = reason_in(error["details"])
    spec = ERROR_BY_REASON[reason]
    assert (error["code"], error["status"]) == (spec.http, spec.status), error
    assert error["message"].startswith(spec.message), error
    return reason


BINDINGS: tuple[type[Binding], ...] = (JsonRpc, HttpJson)


# --- a scriptable agent ----------------------------------------------------------------


class Agent:
    """What a task does depends on its text: ``hold`` waits for :attr:`release`;
    ``ask`` asks "which language?" and writes "written in <answer>"; ``reply`` answers
    with a Message alone ("replied"); anything else is answered "echo: <text>"."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, run: TaskRun) -> str | None:
        if run.text == "reply":
            await run.reply("replied")
            return None
        if run.text == "hold":
            await self.release.wait()
            return "released"
        if run.text == "ask":
            answer = await run.input_required("which language?")
            return f"written in {message_text(answer)}"
        return f"echo: {run.text}"


async def subscribed(door: Door, task_id: str, count: int = 1) -> None:
    """Wait until ``count`` streams follow task ``task_id``."""
    record = door.store.visible(task_id, OPERATOR_CALLER)
    async with asyncio.timeout(5):
        while len(record.subscribers) < count:
            await asyncio.sleep(0.002)


async def settle(door: Door, agent: Agent) -> None:
    """Let every held task end, so no agent outlives its test."""
    agent.release.set()
    await asyncio.wait_for(door.drained(), 5)


# --- a door with the real DoorAuth -----------------------------------------------------


@dataclass
class Formation:
    """Door ``coder`` behind the real DoorAuth, and the tokens of everyone who calls it:
    the operator, members ``planner`` and ``reviewer`` (formation tokens), bearer ``ci``
    (every task method) and bearer ``reader`` (SendMessage and GetTask only)."""

    door: Door
    agent: Agent
    tokens: dict[str, str] = field(default_factory=dict)

    def client(self, who: str | None) -> httpx.AsyncClient:
        headers = {} if who is None else {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.door.app),
                                 base_url=BASE_URL, headers=headers)


READER_TOKEN = "reader-token-0123456789abcdef-01234"


def formation(*, accept_peer_tasks: bool = True, public_card: bool = False,
              gate: GateConfig | None = None, max_body: int = 1 << 20,
              card: CardInfo | None = None) -> Formation:
    """Door ``coder`` behind DoorAuth (``card``: what its card says, else the usual)."""
    operator = OperatorToken.generate()
    policy = AuthPolicy(
        authenticated=True, operator=operator,
        bearers=(DeclaredBearer("ci", CI_TOKEN),
                 DeclaredBearer("reader", READER_TOKEN,
                                frozenset({"SendMessage", "GetTask"}))),
        verifier=FormationVerifier(KEY.public_bytes, FORMATION), member="coder",
        accept_peer_tasks=accept_peer_tasks, public_card=public_card, max_body=max_body)
    agent = Agent()
    door = build_door(agent, DoorSettings(card=card or card_info(),
                                          gate=gate or GateConfig(concurrency=4, queue_depth=4)),
                      policy=policy)
    tokens = {"operator": operator.value, "planner": mint("planner"),
              "reviewer": mint("reviewer"), "ci": CI_TOKEN, "reader": READER_TOKEN,
              "planner-to-reviewer": mint("planner", callee="reviewer")}
    return Formation(door, agent, tokens)


@asynccontextmanager
async def clients(setup: Formation,
                  *who: str | None) -> AsyncIterator[list[httpx.AsyncClient]]:
    """One client per name in ``who`` (None: no credential), all closed on the way out."""
    opened = [setup.client(name) for name in who]
    try:
        yield opened
    finally:
        for client in opened:
            await client.aclose()


# --- comparing transcripts -------------------------------------------------------------

_ID_KEYS = frozenset({"id", "taskId", "contextId", "messageId", "artifactId"})


def scrub(value: Any) -> Any:
    """``value`` with each id replaced by ``<id N>`` (N by first appearance, so equal ids
    stay equal), each timestamp by ``<time>`` and each non-empty page token by
    ``<token>``: two bindings' transcripts of one scenario are then equal."""
    names: dict[str, str] = {}

    def walk(item: Any, key: str | None) -> Any:
        if isinstance(item, dict):
            return {k: walk(v, k) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v, None) for v in item]
        if isinstance(item, str):
            if key in _ID_KEYS:
                return names.setdefault(item, f"<id {len(names) + 1}>")
            if key == "timestamp":
                return "<time>"
            if key == "nextPageToken" and item:
                return "<token>"
        return item

    return walk(value, None)
