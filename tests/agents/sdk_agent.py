"""A third-party A2A 1.0 agent built only on a2a-sdk's own server (no murmur code), for the
gateway tests to put behind a murmur door.

    python sdk_agent.py --port N [--name NAME]      (else the PORT environment variable)

It serves JSON-RPC at ``/`` and its card at ``/.well-known/agent-card.json`` on 127.0.0.1.
What a task does depends on the text of the message that starts it:

- ``stream: ...``  three WORKING updates "chunk 1..3", 0.4 s apart, then an artifact;
- ``slow: N``      works N seconds, cancelable all the while;
- ``input: ...``   INPUT_REQUIRED "say more"; the follow-up on the same task completes it;
- ``call: URL T``  POSTs a ``SendMessage`` with urllib (which honours HTTP_PROXY) to URL;
- ``fail: ...``    FAILED with a message;
- anything else    completes with "<name> heard: <text>".

On stderr: one line with the environment's variable names at start, then one line per
HTTP request with its method, path and every header (the tests scan these for tokens).

The code follows that order: the command line, the outbound call, the behaviours, the
executor that picks one, the card, the request log, the app and ``main``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

CHUNK_INTERVAL_S = 0.4
CALL_TIMEOUT_S = 60.0
RPC_PATH = "/"


# --------------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=None,
                        help="port on 127.0.0.1 (default: the PORT environment variable)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to serve on (a test's own network namespace)")
    parser.add_argument("--card-host", default=None,
                        help="the host its card names (default: --host; a container's "
                             "service name when it serves on 0.0.0.0)")
    parser.add_argument("--name", default="sdk-agent", help="the agent's name")
    args = parser.parse_args(argv)
    if args.port is None:
        port = os.environ.get("PORT", "")
        if not port.isdigit():
            parser.error("give --port N or set PORT")
        args.port = int(port)
    return args


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------- the outbound call


def send_message_body(text: str) -> bytes:
    return json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                               "parts": [{"text": text}]}},
    }).encode()


def post_send_message(url: str, text: str) -> tuple[int, str]:
    """POST a SendMessage with a plain urllib client: its default opener reads HTTP_PROXY
    (and the userinfo in it) by itself, which is the point of this agent."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http URL: {url}")
    headers = {"Content-Type": "application/json", "Accept": "application/json",
               "A2A-Version": "1.0"}
    request = urllib.request.Request(  # noqa: S310 (the scheme is checked above)
        url, data=send_message_body(text), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:  # noqa: S310
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode("utf-8", "replace")


def texts_of(parts: list[dict[str, Any]]) -> list[str]:
    return [part["text"] for part in parts if isinstance(part.get("text"), str)]


def answer_text(body: str) -> str:
    """The text of a SendMessage result: its task's artifacts (else its status message),
    or its message's parts."""
    result = json.loads(body)["result"]
    if "task" in result:
        task = result["task"]
        texts = [t for artifact in task.get("artifacts", []) for t in texts_of(artifact["parts"])]
        if not texts:
            texts = texts_of(task.get("status", {}).get("message", {}).get("parts", []))
        return "\n".join(texts)
    return "\n".join(texts_of(result.get("message", {}).get("parts", [])))


# --------------------------------------------------------------------- behaviours


class Behaviours:
    """One coroutine per kind of task; each ends the task in its final state."""

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def message(updater: TaskUpdater, text: str) -> Any:
        return updater.new_agent_message([Part(text=text)])

    async def answer(self, updater: TaskUpdater, text: str) -> None:
        await updater.add_artifact([Part(text=text)], name="answer")
        await updater.complete()

    async def default(self, updater: TaskUpdater, text: str) -> None:
        await self.answer(updater, f"{self.name} heard: {text}")

    async def stream(self, updater: TaskUpdater, _rest: str) -> None:
        for number in (1, 2, 3):
            await updater.start_work(self.message(updater, f"chunk {number}"))
            await asyncio.sleep(CHUNK_INTERVAL_S)
        await self.answer(updater, f"{self.name} streamed 3 chunks")

    async def slow(self, updater: TaskUpdater, rest: str) -> None:
        seconds = float(rest)
        await updater.start_work(self.message(updater, f"working {seconds:g} s"))
        await asyncio.sleep(seconds)  # CancelTask cancels this sleep
        await self.answer(updater, f"{self.name} worked {seconds:g} s")

    async def ask_for_input(self, updater: TaskUpdater, _rest: str) -> None:
        await updater.requires_input(self.message(updater, "say more"))

    async def follow_up(self, updater: TaskUpdater, text: str) -> None:
        await self.answer(updater, f"{self.name} got: {text}")

    async def call(self, updater: TaskUpdater, rest: str) -> None:
        url, _, text = rest.strip().partition(" ")
        await updater.start_work(self.message(updater, f"calling {url}"))
        try:
            status, body = await asyncio.to_thread(post_send_message, url, text)
        except (OSError, ValueError) as error:
            await updater.failed(self.message(updater, f"{self.name} call failed: {error}"))
            return
        if status != 200:
            await self.answer(updater, f"{self.name} call refused: {status} {body}")
            return
        if "error" in json.loads(body):
            await self.answer(updater, f"{self.name} call error: {body}")
            return
        await self.answer(updater, f"{self.name} was told: {answer_text(body)}")

    async def fail(self, updater: TaskUpdater, rest: str) -> None:
        await updater.failed(self.message(updater, f"{self.name} failed: {rest.strip()}"))

    def pick(self, text: str) -> tuple[Callable[[TaskUpdater, str], Awaitable[None]], str]:
        prefixes = {"stream:": self.stream, "slow:": self.slow, "input:": self.ask_for_input,
                    "call:": self.call, "fail:": self.fail}
        stripped = text.strip()
        for prefix, behaviour in prefixes.items():
            if stripped.startswith(prefix):
                return behaviour, stripped[len(prefix):].strip()
        return self.default, text


# --------------------------------------------------------------------- executor


class ScriptedExecutor(AgentExecutor):
    def __init__(self, name: str) -> None:
        self.behaviours = Behaviours(name)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:  # the v2 handler normally stores the task before calling us
            task = Task(id=context.task_id, context_id=context.context_id,
                        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = context.get_user_input()
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await self.behaviours.follow_up(updater, text)
            return
        behaviour, rest = self.behaviours.pick(text)
        try:
            await behaviour(updater, rest)
        except ValueError as bad_input:
            await updater.failed(Behaviours.message(updater, f"bad input: {bad_input}"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # The handler cancels execute()'s asyncio task right after this returns.
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await updater.cancel(Behaviours.message(updater, "canceled"))


# --------------------------------------------------------------------- card


def agent_card(name: str, port: int, host: str = "127.0.0.1") -> AgentCard:
    return AgentCard(
        name=name,
        description="A third-party a2a-sdk test agent (stream, slow, input, call, fail).",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=f"http://{host}:{port}{RPC_PATH}",
                                             protocol_binding="JSONRPC", protocol_version="1.0")],
        provider=AgentProvider(organization="murmur-door tests",
                               url="https://example.invalid/murmur-door"),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="scripted", name="Scripted replies",
                           description="Answers by the prefix of the first message.",
                           tags=["test"], examples=["hello", "stream: go", "slow: 2"])],
    )


# --------------------------------------------------------------------- request log


class RequestLog:
    """ASGI middleware: one stderr line per HTTP request, every header included."""

    def __init__(self, app: Any, name: str) -> None:
        self.app = app
        self.name = name

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
            say(f"{self.name} request: " + json.dumps(
                {"method": scope["method"], "path": scope["path"], "headers": headers}))
        await self.app(scope, receive, send)


# --------------------------------------------------------------------- app and main


def build_app(name: str, port: int, host: str = "127.0.0.1") -> Any:
    card = agent_card(name, port, host)
    handler = DefaultRequestHandler(agent_executor=ScriptedExecutor(name),
                                    task_store=InMemoryTaskStore(), agent_card=card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url=RPC_PATH)
    return RequestLog(Starlette(routes=routes), name)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    say(f"{args.name} environment: " + " ".join(sorted(os.environ)))
    app = build_app(args.name, args.port, args.card_host or args.host)
    say(f"{args.name} listening on http://{args.host}:{args.port}{RPC_PATH}")
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                access_log=False, timeout_graceful_shutdown=2)


if __name__ == "__main__":
    main()
