"""A third-party A2A 1.0 agent on a2a-sdk's own server (no murmur code) that answers as
Microsoft Agent Framework's ``agent-framework-a2a`` does by default: its reply is a
WORKING status message, then the task completes with no message and no artifact, so the
reply is only in the task's history (docs/gateway.md, "The answer of a task").

    python history_agent.py --port N [--name NAME] [--input-modes TYPE ...]

It serves JSON-RPC at ``/`` and its card at ``/.well-known/agent-card.json`` on
127.0.0.1; every task replies "<name> replied: <text>". ``--input-modes`` sets the card's
``defaultInputModes`` (``text/plain`` unless given; ``application/json`` is what
fasta2a's card always says).

The code follows that order: the command line, the executor, the card, the app and
``main``.
"""

from __future__ import annotations

import argparse
import os
import sys
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
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

RPC_PATH = "/"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=None,
                        help="port on 127.0.0.1 (default: the PORT environment variable)")
    parser.add_argument("--name", default="history-agent", help="the agent's name")
    parser.add_argument("--input-modes", nargs="+", default=["text/plain"],
                        help="the card's defaultInputModes")
    args = parser.parse_args(argv)
    if args.port is None:
        port = os.environ.get("PORT", "")
        if not port.isdigit():
            parser.error("give --port N or set PORT")
        args.port = int(port)
    return args


class HistoryReplyExecutor(AgentExecutor):
    """The reply as a WORKING status message, then COMPLETED with nothing."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:  # the handler normally stores the task before calling us
            task = Task(id=context.task_id, context_id=context.context_id,
                        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        reply = f"{self.name} replied: {context.get_user_input()}"
        await updater.start_work(updater.new_agent_message([Part(text=reply)]))
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await updater.cancel()


def agent_card(name: str, port: int, input_modes: list[str]) -> AgentCard:
    return AgentCard(
        name=name, description="Replies in a WORKING status message only.", version="1.0.0",
        supported_interfaces=[AgentInterface(url=f"http://127.0.0.1:{port}{RPC_PATH}",
                                             protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=input_modes, default_output_modes=["text/plain"],
        skills=[AgentSkill(id="reply", name="Reply", description="Replies to a message.",
                           tags=["test"])],
    )


def build_app(name: str, port: int, input_modes: list[str]) -> Any:
    card = agent_card(name, port, input_modes)
    handler = DefaultRequestHandler(agent_executor=HistoryReplyExecutor(name),
                                    task_store=InMemoryTaskStore(), agent_card=card)
    return Starlette(routes=create_agent_card_routes(card)
                     + create_jsonrpc_routes(handler, rpc_url=RPC_PATH))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"{args.name} listening on http://127.0.0.1:{args.port}{RPC_PATH}", file=sys.stderr,
          flush=True)
    uvicorn.run(build_app(args.name, args.port, args.input_modes), host="127.0.0.1",
                port=args.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=2)


if __name__ == "__main__":
    main()
