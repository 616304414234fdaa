"""A BeeAI Framework agent served over A2A 0.3 (a2a-sdk 0.3.x) by beeai-framework's
``A2AServer``, on an offline, scripted chat model.

    python server.py [--port N] [--name NAME]      (else the PORT environment variable)

Runs in its own venv (see requirements.txt: ``beeai-framework[a2a]`` pins a2a-sdk below
0.4). A ``RequirementAgent`` (BeeAI's agent for tool-calling models) whose model is a
``ChatModel`` subclass answering "<name> heard: <last user text>" without any network, by
calling the agent's ``final_answer`` tool as a tool-calling model does.
``beeai_framework.adapters.a2a.serve.server.A2AServer`` serves it with a2a-sdk 0.3's
``A2AStarletteApplication`` on uvicorn at 127.0.0.1: JSON-RPC at ``/``, the card at
``/.well-known/agent-card.json``, and ``/health``. A message "X" completes a task whose
final status message says "<name> heard: X" (no artifact); ``message/stream`` yields the
submitted, working and completed status updates (no task first). No network, no key.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from collections.abc import AsyncGenerator
from typing import Self

os.environ.setdefault("BEEAI_LOG_LEVEL", "WARNING")  # beeai's own loggers (its settings)

from beeai_framework.adapters.a2a.serve.server import A2AServer, A2AServerConfig
from beeai_framework.agents.requirement import RequirementAgent
from beeai_framework.backend import (
    AssistantMessage,
    ChatModel,
    MessageToolCallContent,
    UserMessage,
)
from beeai_framework.backend.constants import ProviderName
from beeai_framework.backend.types import ChatModelInput, ChatModelOutput, ChatModelUsage
from beeai_framework.context import RunContext

TASK_MARK = "Your task: "  # RequirementAgent's task prompt ends "Your task: {{prompt}}"


class ScriptedChatModel(ChatModel):
    """A chat model that answers "<name> heard: <last user text>" without any network: as a
    tool-calling model does, by calling the ``final_answer`` tool when it is offered one
    (a ``RequirementAgent`` offers it, and requires it), else in text."""

    def __init__(self, speaker: str) -> None:
        super().__init__()
        self.speaker = speaker

    async def clone(self) -> Self:  # the agent is cloned, with its model, for each task
        return type(self)(self.speaker)

    @property
    def model_id(self) -> str:
        return "scripted"

    @property
    def provider_id(self) -> ProviderName:
        return "beeai"

    async def _create(self, input: ChatModelInput, run: RunContext) -> ChatModelOutput:
        user = next((m for m in reversed(input.messages) if isinstance(m, UserMessage)), None)
        # the agent hands the user's text on in its task prompt, "...Your task: <text>"
        prompt = user.text if user is not None else ""
        heard = prompt.partition(TASK_MARK)[2] if TASK_MARK in prompt else prompt
        answer = f"{self.speaker} heard: {heard}"
        if any(tool.name == "final_answer" for tool in input.tools or []):
            call = MessageToolCallContent(id=f"call_{uuid.uuid4().hex[:8]}",
                                          tool_name="final_answer",
                                          args=json.dumps({"response": answer}))
            message = AssistantMessage(call)
        else:
            message = AssistantMessage(answer)
        usage = ChatModelUsage(prompt_tokens=len(heard), completion_tokens=len(answer),
                               total_tokens=len(heard) + len(answer))
        return ChatModelOutput(output=[message], usage=usage, finish_reason="stop")

    async def _create_stream(self, input: ChatModelInput, run: RunContext
                             ) -> AsyncGenerator[ChatModelOutput]:
        yield await self._create(input, run)  # one chunk: the whole answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "9000")))
    parser.add_argument("--name", default="beeai")
    args = parser.parse_args()

    agent = RequirementAgent(llm=ScriptedChatModel(args.name), name=args.name,
                             description=f"{args.name}: a BeeAI agent on a scripted model",
                             instructions="Say what you heard.")
    server = A2AServer(config=A2AServerConfig(host="127.0.0.1", port=args.port))
    server.register(agent, url=f"http://127.0.0.1:{args.port}/")
    server.serve()


if __name__ == "__main__":
    main()
