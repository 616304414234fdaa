"""A real crewai A2A server (A2A protocol 0.3, a2a-sdk 0.3.x) driven by an offline, scripted
LLM, for tests that put a third-party framework's agent behind a murmur door.

    python server.py [--port N] [--name NAME]      (else the PORT environment variable)

Runs in its own venv (see requirements.txt).  crewai ships the server half of A2A but no app:
its ``crewai.a2a.utils.task.execute``/``cancel`` run a crewai ``Agent`` on a request and its
``Agent.to_agent_card`` builds the card; a2a-sdk 0.3's ``A2AStarletteApplication`` serves them,
JSON-RPC at ``/`` on 127.0.0.1, the card at ``/.well-known/agent-card.json`` (and the legacy
``/.well-known/agent.json``).  A message "X" completes a task whose artifact and last history
message say "<name> heard: X"; ``message/stream`` yields just that one finished task.
Telemetry and tracing are switched off; no network, no key.  Importing crewai writes
under HOME (see below), so give it a scratch HOME.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

os.environ.update(CREWAI_DISABLE_TELEMETRY="true", CREWAI_DISABLE_TRACKING="true",
                  CREWAI_TRACING_ENABLED="false", OTEL_SDK_DISABLED="true")
# Importing crewai writes ~/.config/crewai/, ~/.local/share/crewai/credentials/secret.key and
# ~/.local/share/<CREWAI_STORAGE_DIR, else the cwd's name>/: run it with HOME set to a scratch dir.
os.environ.setdefault("CREWAI_STORAGE_DIR", "murmur-door-crewai")
os.environ.pop("REDIS_URL", None)  # else crewai.a2a keeps its cancel flags in that Redis

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore
from crewai import Agent
from crewai.a2a.config import A2AServerConfig
from crewai.a2a.utils import task as crewai_a2a
from crewai.llms.base_llm import BaseLLM


class ScriptedLLM(BaseLLM):
    """An LLM that answers "<name> heard: <task text>" in crewai's ReAct form, without network."""

    speaker: str = "crewai"

    def call(self, messages, tools=None, callbacks=None, available_functions=None,
             from_task=None, from_agent=None, response_model=None) -> str:
        text = from_task.description if from_task is not None else str(messages)
        return f"Thought: I heard it.\nFinal Answer: {self.speaker} heard: {text}"

    async def acall(self, *args: Any, **kwargs: Any) -> str:
        return self.call(*args, **kwargs)


class CrewAIExecutor(AgentExecutor):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await crewai_a2a.execute(self.agent, context, event_queue)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await crewai_a2a.cancel(context, event_queue)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "9000")))
    parser.add_argument("--name", default="crewai")
    args = parser.parse_args()

    agent = Agent(role=args.name, goal="Say what was heard.",
                  backstory="A crewai agent on a scripted LLM.",
                  llm=ScriptedLLM(model="scripted", speaker=args.name), verbose=False,
                  a2a=A2AServerConfig(name=args.name))
    card = agent.to_agent_card(f"http://127.0.0.1:{args.port}/")
    handler = DefaultRequestHandler(agent_executor=CrewAIExecutor(agent),
                                    task_store=InMemoryTaskStore())
    app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
