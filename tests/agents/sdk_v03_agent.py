"""A third-party A2A 0.3 agent built only on a2a-sdk 0.3's own server (no murmur code),
answering as BeeAI's A2A server does, for the gateway tests to put behind a murmur door.
It needs a Python with a2a-sdk 0.3 and its HTTP server (``a2a-sdk[http-server]==0.3.x``;
tests/support/third_party.py finds one), never the checkout's venv (a2a-sdk 1.x).

    python sdk_v03_agent.py --port N [--name NAME]      (else the PORT environment variable)

It serves 0.3 JSON-RPC at ``/`` and a 0.3 card (top-level ``url``, ``preferredTransport``)
at ``/.well-known/agent-card.json`` on 127.0.0.1. Every task, as BeeAI's executor does,
begins with a ``submitted`` status update and no Task (0.3 allowed that; A2A 1.0 has a
stream begin with the Task), then ``working``, then:

- ``slow: N``      works N seconds, cancelable all the while;
- anything else    an artifact "<name> heard: <text>", completed.

a2a-sdk 0.3 answers a cancel of an ended task with ``-32002`` and no ErrorInfo.

The code follows that order: the command line, the executor, the card, the app and
``main``.
"""

from __future__ import annotations

import argparse
import asyncio
import os

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, TextPart

# --------------------------------------------------------------------- command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=None,
                        help="the port to listen on (default: the PORT variable)")
    parser.add_argument("--name", default="sdk-v03-agent", help="the agent's name")
    args = parser.parse_args(argv)
    if args.port is None:
        args.port = int(os.environ["PORT"])
    return args


# --------------------------------------------------------------------- executor


class BeeAILikeExecutor(AgentExecutor):
    """A status update first, as BeeAI's server sends, then the work."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await updater.submit()
        text = context.get_user_input()
        await updater.start_work(updater.new_agent_message([Part(root=TextPart(text="on it"))]))
        if text.startswith("slow:"):
            await asyncio.sleep(float(text[len("slow:"):]))  # CancelTask cancels this
        await updater.add_artifact([Part(root=TextPart(text=f"{self.name} heard: {text}"))],
                                   name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await updater.cancel()


# --------------------------------------------------------------------- card, app, main


def agent_card(name: str, port: int) -> AgentCard:
    return AgentCard(
        name=name, description="An A2A 0.3 agent answering as BeeAI does (tests).",
        version="0.3.0", url=f"http://127.0.0.1:{port}/", preferred_transport="JSONRPC",
        protocol_version="0.3.0", capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="chat", name="Chat", description="Answers.", tags=["test"])])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    card = agent_card(args.name, args.port)
    handler = DefaultRequestHandler(agent_executor=BeeAILikeExecutor(args.name),
                                    task_store=InMemoryTaskStore())
    app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
