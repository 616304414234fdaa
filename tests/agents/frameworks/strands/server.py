"""A real strands-agents A2A server (A2A protocol 0.3, a2a-sdk 0.3.x) driven by an offline,
scripted model, for tests that put a third-party framework's agent behind a murmur door.

    python server.py [--port N] [--name NAME]      (else the PORT environment variable)

Runs in its own venv (see requirements.txt).  ``strands.multiagent.a2a.A2AServer`` serves
JSON-RPC at ``/`` on 127.0.0.1 and its card at ``/.well-known/agent-card.json`` (also at the
legacy ``/.well-known/agent.json``).  Every message "X" completes a task whose artifact says
"<name> heard: X"; ``message/stream`` streams it as artifact-update chunks, one per word of X
(so the blocking task's artifact holds one text part per word, plus an empty closing
part).  No network, no key.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncGenerator, AsyncIterable
from typing import Any

os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from strands import Agent
from strands.models import Model
from strands.multiagent.a2a import A2AServer


class ScriptedModel(Model):
    """A model that answers "<name> heard: <last user text>" without any network."""

    def __init__(self, name: str) -> None:
        self.config: dict[str, Any] = {"model_id": "scripted", "name": name}

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> dict[str, Any]:
        return self.config

    def structured_output(self, output_model: Any, prompt: Any, system_prompt: Any = None,
                          **kwargs: Any) -> AsyncGenerator[Any, None]:
        raise NotImplementedError("the scripted model has no structured output")

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Any = None,
                     **kwargs: Any) -> AsyncIterable[Any]:
        user = next((m for m in reversed(messages) if m["role"] == "user"), {"content": []})
        text = " ".join(b["text"] for b in user["content"] if "text" in b)
        answer = f"{self.config['name']} heard: {text}"
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        # One chunk per word of the user's text (the first carries "<name> heard: <word1>"), so a
        # one-word message gives one text part and a longer one streams as several artifact chunks.
        words = text.split(" ")
        for i, word in enumerate(words):
            chunk = f"{self.config['name']} heard: {word}" if i == 0 else f" {word}"
            yield {"contentBlockDelta": {"delta": {"text": chunk}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}
        usage = {"inputTokens": len(text), "outputTokens": len(answer),
                 "totalTokens": len(text) + len(answer)}
        yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 0}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "9000")))
    parser.add_argument("--name", default="strands")
    args = parser.parse_args()

    def make_agent(context_id: str) -> Agent:
        return Agent(name=args.name,
                     description=f"{args.name}: a strands agent on a scripted model",
                     model=ScriptedModel(args.name), callback_handler=None)

    server = A2AServer(agent_factory=make_agent, host="127.0.0.1", port=args.port,
                       enable_a2a_compliant_streaming=True)
    server.serve(log_level="warning")


if __name__ == "__main__":
    main()
