"""A google-adk agent served over A2A by ADK's ``to_a2a``, on an offline model.

    PORT=18002 python server.py [--name NAME]       (or: python server.py --port 18002)

The model is a ``BaseLlm`` subclass that yields "<name> heard: <last user text>" without any
network. ADK picks its A2A code from the installed a2a-sdk (google.adk.a2a._compat), so the
same script serves either version, by the venv it runs in:

- a2a-sdk 1.x (../adk/requirements.txt): A2A 1.0, the card has ``supportedInterfaces``
  (protocolVersion 1.0); the JSON-RPC route at ``/`` also takes 0.3 method names;
- a2a-sdk 0.3.x (../adk_v03/requirements.txt): A2A 0.3, the card has a top-level ``url``,
  ``protocolVersion`` 0.3.0 and ``preferredTransport`` JSONRPC.

127.0.0.1 only, card at ``/.well-known/agent-card.json``.
"""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import AsyncGenerator

import uvicorn
from google.adk.a2a.utils.agent_to_a2a import to_a2a
from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm, LlmCapabilities, LlmRequest, LlmResponse
from google.genai import types


class EchoLlm(BaseLlm):
    """Answers "<name> heard: <text of the last user turn>"."""

    name: str = "adk-echo"

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=False)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        text = ""
        for content in reversed(llm_request.contents or []):
            if content.role == "user":
                text = "".join(p.text or "" for p in content.parts or [] if not p.thought)
                break
        answer = types.Part(text=f"{self.name} heard: {text}")
        yield LlmResponse(content=types.Content(role="model", parts=[answer]))


def main() -> None:
    # ADK warns on each A2A class it builds
    warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")) or None)
    parser.add_argument("--name", default="adk-echo")
    args = parser.parse_args()
    if not args.port:
        parser.error("give --port N or set PORT")
    agent = LlmAgent(
        name=args.name.replace("-", "_"),  # ADK agent names must be identifiers
        model=EchoLlm(model="echo", name=args.name),
        description="google-adk echo agent on an offline BaseLlm",
        instruction="Echo the user.",
    )
    app = to_a2a(agent, host="127.0.0.1", port=args.port, protocol="http")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
