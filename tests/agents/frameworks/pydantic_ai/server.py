"""A pydantic-ai agent served over A2A by fasta2a's Pydantic AI bridge, on an offline model.

    PORT=18001 python server.py [--name NAME]       (or: python server.py --port 18001)

Pydantic AI 2 removed ``Agent.to_a2a()``; ``fasta2a.pydantic_ai.agent_to_a2a`` is its
replacement. The model is a ``FunctionModel`` that answers "<name> heard: <last user text>"
(streamed in two chunks when asked to stream), so nothing leaves the machine. It listens on
127.0.0.1, card at ``/.well-known/agent-card.json`` (A2A 1.0 ``supportedInterfaces``),
JSON-RPC at ``/``.

fasta2a never blocks: a send answers with the task still SUBMITTED (whatever
``returnImmediately`` says), and the answer is had by ``GetTask`` or by streaming. Its card
always says ``application/json`` for the input modes, though the agent takes text: a capsule
states ``agent.input_modes`` (docs/frameworks/pydantic-ai.md).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator

import uvicorn
from fasta2a.pydantic_ai import agent_to_a2a
from pydantic_ai import (
    Agent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel


def last_user_text(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, UserPromptPart):
                    content = part.content
                    if isinstance(content, str):
                        return content
                    return " ".join(c for c in content if isinstance(c, str))
    return ""


def make_model(name: str) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f"{name} heard: {last_user_text(messages)}")])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield f"{name} heard: "
        yield last_user_text(messages)

    return FunctionModel(answer, stream_function=stream, model_name="echo")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")) or None)
    parser.add_argument("--name", default="pydantic-ai-echo")
    args = parser.parse_args()
    if not args.port:
        parser.error("give --port N or set PORT")
    agent = Agent(make_model(args.name), name=args.name, instructions="Echo the user.")
    app = agent_to_a2a(agent, name=args.name, url=f"http://127.0.0.1:{args.port}/",
                       description="pydantic-ai echo agent on an offline FunctionModel")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
