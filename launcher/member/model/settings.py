"""What a model member's driver is told at start (the agent protocol's ``start``).

The runtime builds :class:`ModelSettings` from the manifest (``agent.model`` and
``inference``) and sends :meth:`ModelSettings.wire`; the agent process reads it back
with :meth:`ModelSettings.from_wire`. Nothing here is a secret: the endpoint's key never
reaches the agent process (the runtime attaches it at egress; ``api_key_env`` is here
only so that errors can name the variable).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CommandToolSpec", "ModelSettings"]


@dataclass(frozen=True, slots=True)
class CommandToolSpec:
    name: str
    argv: tuple[str, ...]
    description: str = ""
    timeout: float = 60.0


@dataclass(frozen=True, slots=True)
class ModelSettings:
    base_url: str                       # as written: a URL, or ``${VAR}``
    model: str
    api_key_env: str | None = None
    max_turns: int = 8
    max_tokens: int | None = None
    temperature: float | None = None
    budget_tokens: int | None = None
    #: ``trace.content``: prompts and answers in the trace.
    content: bool = False
    #: ``capabilities.network.allow``: checked before the first request (the forward
    #: proxy enforces it anyway).
    network_allow: tuple[str, ...] = ()
    commands: tuple[CommandToolSpec, ...] = ()
    mcp: tuple[tuple[str, ...], ...] = ()
    #: The capsule's name and version, for the ``[Capsule]`` block.
    capsule: str = ""
    version: str = ""
    #: A version 2 roster's ``limits.tokens`` of this member: what all its tasks may
    #: spend while the formation runs (docs/bounds.md).
    member_tokens: int | None = None
    #: The endpoint's bounds (docs/llm.md, "A hostile endpoint"): an answer's bytes, the
    #: seconds a whole answer may take, the seconds a stream may stay silent.
    max_answer_bytes: int = 8 * 1024 * 1024
    timeout: float = 600.0
    idle_timeout: float = 60.0

    @classmethod
    def of(cls, model: Any, inference: Any, *, content: bool, network_allow: list[str],
           capsule: str, version: str, member_tokens: int | None = None) -> ModelSettings:
        """From a manifest's ``agent.model`` and ``inference``."""
        commands = tuple(CommandToolSpec(tool.command.name, tuple(tool.command.argv),
                                         tool.command.description, float(tool.command.timeout))
                         for tool in model.tools if tool.command is not None)
        servers = tuple(tuple(tool.mcp) for tool in model.tools if tool.mcp is not None)
        return cls(base_url=inference.base_url, model=inference.model,
                   api_key_env=inference.api_key_env, max_turns=inference.max_turns,
                   max_tokens=inference.max_tokens, temperature=inference.temperature,
                   budget_tokens=inference.budget.tokens, content=content,
                   network_allow=tuple(network_allow), commands=commands, mcp=servers,
                   capsule=capsule, version=version, member_tokens=member_tokens,
                   max_answer_bytes=inference.max_answer_bytes,
                   timeout=float(inference.timeout),
                   idle_timeout=float(inference.idle_timeout))

    def wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ModelSettings:
        fields = dict(data)
        fields["network_allow"] = tuple(fields.get("network_allow", ()))
        fields["commands"] = tuple(CommandToolSpec(**{**tool, "argv": tuple(tool["argv"])})
                                   for tool in fields.get("commands", ()))
        fields["mcp"] = tuple(tuple(server) for server in fields.get("mcp", ()))
        return cls(**fields)
