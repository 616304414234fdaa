"""``agent.model`` and ``inference``: a member that is a model (docs/llm.md).

In order: the bounds on what a model member declares, the rules of a tool's name and of
``inference.base_url`` (a literal ``http(s)`` URL, or ``${VAR}`` with an optional
``:-default``, as ``model`` may be too) and their expansion, the tools
(:class:`CommandTool`, :class:`ModelTool`), :class:`ModelAgent` (``agent.model``),
:class:`Budget` and :class:`Inference`. What holds across the manifest (a model agent
needs ``inference.transport: http``; the key's variable and a ``${VAR}`` base URL or model
are granted by ``capabilities.env.allow``; a literal base URL's host by
``capabilities.network.allow``) is checked in ``manifest.py``, with
:func:`model_problems`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, model_validator

from launcher.admission.manifest_fields import (
    Duration,
    EnvName,
    NonBlank,
    RelativeFile,
    Strict,
    checked,
    refuse,
)

#: Tools a model member may declare; an OpenAI-compatible endpoint takes about 128.
MAX_TOOLS = 64
MAX_URL_LENGTH = 2048
#: The names the runtime gives its own tools; a declared tool may not take them.
RUNTIME_TOOLS = frozenset({"call_member", "delegate"})
#: An OpenAI function name: letters, digits, ``_`` and ``-``, at most 64.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: ``${VAR}`` or ``${VAR:-default}``: the whole of ``base_url`` or ``model``, read from the
#: environment at start (the default when the variable is unset or empty).
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]{0,127})(?::-([^}]*))?\}")


def _tool_name(value: str) -> str:
    bad = not TOOL_NAME.fullmatch(value) or value in RUNTIME_TOOLS
    return checked(f"must be a tool name of letters, digits, `_` and `-` (at most 64) other "
                   f"than {' and '.join(sorted(RUNTIME_TOOLS))}, and `{value}` is not"
                   if bad else None, "rename the tool, such as `word_count`", value)


def url_problem(value: str) -> str | None:
    """What is wrong with a literal ``base_url``, or None."""
    if len(value) > MAX_URL_LENGTH:
        return f"is longer than {MAX_URL_LENGTH} characters"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        return f"must be an http or https URL, and `{value}` is not"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http or https URL, and `{value}` is not"
    if parts.query or parts.fragment or parts.username or parts.password:
        return "must have no query, fragment or user name (the key goes in api_key_env)"
    return None


def _base_url(value: str) -> str:
    found = VARIABLE.fullmatch(value)
    literal = value if found is None else found[2]
    problem = None if literal is None else url_problem(literal)
    return checked(problem, "write the endpoint's base URL, such as "
                   "`https://api.openai.com/v1` or `http://localhost:11434/v1`, or "
                   "`${OPENAI_BASE_URL:-https://api.openai.com/v1}`", value)


def expand(value: str, environ: Mapping[str, str]) -> str | None:
    """``value`` with its ``${VAR}`` (or ``${VAR:-default}``) read from ``environ``; None
    when the variable is unset or empty and there is no default."""
    found = VARIABLE.fullmatch(value)
    if found is None:
        return value
    return environ.get(found[1], "").strip() or found[2] or None


ToolName = Annotated[str, AfterValidator(_tool_name)]
BaseUrl = Annotated[str, AfterValidator(_base_url)]


class CommandTool(Strict):
    name: ToolName
    argv: list[NonBlank] = Field(min_length=1, description="the program and its arguments; "
                                 "the model's `input` arrives on stdin, stdout is the result")
    description: str = ""
    timeout: int = Field(default=60, ge=1, le=3600,
                         description="seconds a run may take before it is killed")


class ModelTool(Strict):
    mcp: list[NonBlank] | None = Field(
        default=None, min_length=1, description="an MCP server over stdio, such as "
        "`[python3, tools/server.py]`; its tools are offered by their names and schemas")
    command: CommandTool | None = Field(
        default=None, description="`{name, argv, description}`: a program run once per call")

    @model_validator(mode="after")
    def _one_kind(self) -> ModelTool:
        if (self.mcp is None) == (self.command is None):
            raise refuse("must have exactly one of `mcp` and `command`",
                         "write `mcp: [program, args...]` for an MCP server or `command: "
                         "{name: ..., argv: [...]}` for a program")
        return self


class ModelAgent(Strict):
    instructions: RelativeFile | None = Field(
        default=None, description="the capsule's instructions file (default: `MURMUR.md` "
        "when the capsule ships one)")
    tools: list[ModelTool] = Field(default_factory=list, max_length=MAX_TOOLS)

    @model_validator(mode="after")
    def _distinct_names(self) -> ModelAgent:
        names = [tool.command.name for tool in self.tools if tool.command is not None]
        if len(names) != len(set(names)):
            raise refuse("gives two command tools the same `name`",
                         "give each tool its own name")
        return self


#: ``inference.max_answer_bytes`` unless the manifest says otherwise.
DEFAULT_ANSWER_BYTES = 8 * 1024 * 1024
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")


def _header_name(value: str) -> str:
    if not _HEADER_NAME.fullmatch(value):
        raise refuse(f"is `{value}`, which is not a header name",
                     "write a name such as `Authorization` or `x-api-key`")
    if value.lower() in ("host", "content-length", "transfer-encoding", "connection"):
        raise refuse(f"is `{value}`, a header the request needs for itself",
                     "write the header the endpoint reads its key from, such as "
                     "`Authorization` or `x-api-key`")
    return value.lower()


HeaderName = Annotated[str, AfterValidator(_header_name)]


class Budget(Strict):
    tokens: int | None = Field(default=None, ge=1, description="tokens (input and output) "
                               "one task may spend across its model requests")


class Inference(Strict):
    max_turns: int = Field(default=8, ge=1, le=1000, description="turns a task may take; "
                           "for a model member, its requests to the endpoint")
    transport: Literal["http"] | None = Field(
        default=None, description="`http`: an OpenAI-compatible chat-completions endpoint")
    base_url: BaseUrl | None = Field(
        default=None, description="the endpoint, such as `https://api.openai.com/v1`, or "
        "`${VAR}` / `${VAR:-default}`")
    model: NonBlank | None = Field(default=None, description="the model's name at the "
                                   "endpoint, or `${VAR}` / `${VAR:-default}`")
    api_key_env: EnvName | None = Field(
        default=None, description="the variable holding the key (in `capabilities.env.allow`)")
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000,
                                   description="the most tokens one answer may have")
    temperature: float | None = Field(default=None, ge=0, le=2)
    budget: Budget = Field(default_factory=Budget)
    api_key_header: HeaderName = Field(
        default="authorization", description="the header the runtime puts the key in: "
        "`Authorization` (as `Bearer <key>`), or another such as `x-api-key` (the bare key)")
    max_answer_bytes: int = Field(
        default=DEFAULT_ANSWER_BYTES, ge=1024, le=1024 * 1024 * 1024,
        description="the most bytes one answer of the endpoint may have (default 8 MiB)")
    timeout: Duration = Field(default=600, description="how long one whole answer may "
                              "take, from the request to its last byte (default 600s)")
    idle_timeout: Duration = Field(default=60, description="how long a streamed answer "
                                   "may go silent (default 60s)")


def model_problems(agent: ModelAgent | None, inference: Inference, *, env_allow: list[str],
                   network_allow: list[str]) -> Iterator[tuple[tuple[str, ...], str, str]]:
    """What is wrong across the manifest, as ``(path, problem, fix)``."""
    if agent is None:
        if inference.transport is not None:
            yield (("inference", "transport"), "is set although the agent is not a model",
                   "add `agent: {model: {}}`, or remove `inference.transport`")
        return
    if inference.transport is None:
        yield (("inference", "transport"), "must be `http` for an `agent.model`",
               "write `inference: {transport: http, base_url: ..., model: ...}`")
    for key in ("base_url", "model"):
        if getattr(inference, key) is None:
            yield (("inference", key), "is required for an `agent.model`",
                   "write the endpoint's base URL, such as `https://api.openai.com/v1`"
                   if key == "base_url" else "write the model's name, such as `gpt-4o-mini`")
    variable = inference.api_key_env
    if variable is not None and variable not in env_allow:
        yield (("inference", "api_key_env"), f"names `{variable}`, which "
               "`capabilities.env.allow` does not grant", f"add {variable} to "
               "capabilities.env.allow")
    for key in ("base_url", "model"):
        found = VARIABLE.fullmatch(getattr(inference, key) or "")
        if found and found[1] not in env_allow:
            yield (("inference", key), f"refers to `${{{found[1]}}}`, which "
                   "`capabilities.env.allow` does not grant", f"add {found[1]} to "
                   "capabilities.env.allow")
    url = inference.base_url or ""
    if url and not VARIABLE.fullmatch(url):
        host = urlsplit(url).hostname or ""
        if not _granted(url, network_allow):
            yield (("inference", "base_url"), f"names host `{host}`, which "
                   "`capabilities.network.allow` does not grant", f"add {host} to "
                   "capabilities.network.allow")


def _granted(url: str, allow: list[str]) -> bool:
    """The forward proxy's own rule (``localhost`` admits every loopback address)."""
    from gateway.proxy.egress import AllowList

    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    try:
        return AllowList(allow).allows_host(parts.hostname or "", port)
    except ValueError:      # an entry the proxy cannot read: refused where it is checked
        return True


__all__ = ["Budget", "CommandTool", "Inference", "ModelAgent", "ModelTool", "RUNTIME_TOOLS",
           "VARIABLE", "expand", "model_problems", "url_problem"]
