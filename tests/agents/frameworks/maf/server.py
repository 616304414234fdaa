"""A Microsoft Agent Framework agent served over A2A 1.0 by agent-framework-a2a's
``A2AExecutor``, on an offline, scripted chat client.

    python server.py [--port N] [--name NAME] [--stream]     (else the PORT environment variable)

Runs in its own venv (see requirements.txt: agent-framework-a2a on a2a-sdk 1.x). An
``agent_framework.Agent`` whose chat client is a ``BaseChatClient`` subclass answering
"<name> heard: <last user text>" without any network (streamed one chunk per word of the
text when asked to stream), run by ``A2AExecutor`` under a2a-sdk 1.x's
``DefaultRequestHandler``; the card's routes and JSON-RPC at ``/`` (A2A 1.0,
``supportedInterfaces``) in a Starlette app on uvicorn at 127.0.0.1. No network, no key.

The executor has two modes, and ``--stream`` picks the second:

- ``A2AExecutor(agent)`` (``stream=False``, its default) runs the agent to its end and
  publishes the answer as a ``TASK_STATE_WORKING`` status message, then completes the task
  with no message and no artifact: the answer is the last agent message of the task's
  history;
- ``A2AExecutor(agent, stream=True)`` publishes each chunk as an artifact update (one
  artifact, ``append`` after the first chunk), then completes the task.
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any

import uvicorn
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
)
from agent_framework.a2a import A2AExecutor
from starlette.applications import Starlette


class ScriptedChatClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """A chat client that answers "<name> heard: <last user text>" without any network.
    Composed as MAF's own clients are (function invocation over ``BaseChatClient``), so
    ``Agent`` takes it as a full client."""

    OTEL_PROVIDER_NAME = "scripted"

    def __init__(self, speaker: str) -> None:
        super().__init__()
        self.speaker = speaker

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        user = next((m for m in reversed(messages) if m.role == "user"), None)
        text = user.text if user is not None else ""
        if stream:
            message_id = str(uuid.uuid4())

            async def chunks() -> AsyncIterator[ChatResponseUpdate]:
                # one chunk per word of the text, the first "<name> heard: <word>"
                for i, word in enumerate(text.split(" ")):
                    chunk = f"{self.speaker} heard: {word}" if i == 0 else f" {word}"
                    yield ChatResponseUpdate(role="assistant", message_id=message_id,
                                             contents=[Content.from_text(chunk)])

            return self._build_response_stream(chunks())

        async def answer() -> ChatResponse:
            return ChatResponse(messages=[Message(role="assistant",
                                                  contents=[f"{self.speaker} heard: {text}"])])

        return answer()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")) or None)
    parser.add_argument("--name", default="maf-echo")
    parser.add_argument("--stream", action="store_true",
                        help="A2AExecutor(stream=True): the answer as artifact chunks")
    args = parser.parse_args()
    if not args.port:
        parser.error("give --port N or set PORT")

    agent = Agent(ScriptedChatClient(args.name), "Echo the user.", name=args.name,
                  description="Microsoft Agent Framework echo agent on a scripted chat client")
    card = AgentCard(
        name=args.name, description=agent.description or "", version="1.0.0",
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        capabilities=AgentCapabilities(streaming=True),
        supported_interfaces=[AgentInterface(url=f"http://127.0.0.1:{args.port}/",
                                             protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        skills=[AgentSkill(id="echo", name="echo", description="Says what it heard.",
                           tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=A2AExecutor(agent, stream=args.stream),
                                    task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
