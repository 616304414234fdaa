"""``agent.a2a``: a gateway member's A2A server behind the door (docs/gateway.md), its rules
and :class:`A2aAgent`, the part of the manifest that names it.

In order: the bounds on what ``agent.a2a`` may hold, :class:`UpstreamHeaderError`, the
rules of its ``url``, ``card_path`` and ``command``, the rules of its upstream
``headers`` (``${VAR}`` references, never a credential written in murmur.yaml) and their
expansion from the environment, then :class:`A2aAgent`. That each ``${VAR}`` is granted
by ``capabilities.env.allow`` is a rule of the whole manifest, in ``manifest.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated
from urllib.parse import unquote, urlsplit

from pydantic import AfterValidator, Field, model_validator

from gateway.redaction import redact
from launcher.admission.manifest_fields import (
    ENV_NAME_PATTERN,
    HOST_PATTERN,
    NonBlank,
    Strict,
    checked,
    refuse,
    refuse_below,
)
from launcher.errors import LauncherError

#: Where the upstream serves its agent card unless ``card_path`` says otherwise.
DEFAULT_CARD_PATH = "/.well-known/agent-card.json"
#: The one placeholder of ``agent.a2a.command``: the free loopback port the runtime picks.
PORT_PLACEHOLDER = "{port}"
#: Bounds on what ``agent.a2a`` may hold (docs/admission.md, "Gateway members").
MAX_URL_LENGTH = 2048
MAX_CARD_PATH_LENGTH = 1024
MAX_UPSTREAM_HEADERS = 32
MAX_HEADER_NAME_LENGTH = 128
#: Both a header value as written and as expanded from the environment.
MAX_HEADER_VALUE_LENGTH = 8192
#: An RFC 9110 field name: one or more ``tchar``.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Printable ASCII and horizontal tab: never CR, LF, NUL or another control character.
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
#: Headers the door itself writes or that frame the relayed request, compared lower-case.
RESERVED_HEADERS = frozenset({
    "a2a-version", "connection", "content-length", "host", "keep-alive", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade"})
_RESERVED_PREFIX = "x-murmur-"


class UpstreamHeaderError(LauncherError, ValueError):
    """A header of ``agent.a2a.headers`` cannot be sent: a ``${VAR}`` is not set, or its
    value cannot go into a header. The message names the header and the variable, never
    a value."""


def _upstream_url(value: str) -> str:
    fix = ("write the address of the running agent, such as `http://10.0.0.5:9999`: "
           "`http` or `https`, a host, an optional port, and no path")
    if PORT_PLACEHOLDER in value:
        raise refuse("holds `{port}`, which only `agent.a2a.command` may use: a `url` "
                     "names an agent that already runs on a port of its own",
                     "write the agent's real port, or use `command` to have the runtime "
                     "start it on a free port")
    problem = _url_problem(value)
    return checked(problem, fix, value)


def _url_problem(value: str) -> str | None:
    if "@" in value:
        # Checked first, so that no refusal below quotes a password written in the url.
        return ("must not hold a user or password (a credential written in murmur.yaml); "
                "send it with `headers` and `${VAR}`")
    if len(value) > MAX_URL_LENGTH:
        return f"is longer than {MAX_URL_LENGTH} characters"
    if not value.isascii() or not value.isprintable() or " " in value or "\\" in value:
        return "must be printable ASCII with no spaces or backslashes"
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return f"is not a URL with a valid host and port: `{value}`"
    if parts.scheme not in ("http", "https"):
        return f"must start with `http://` or `https://`, and `{value}` does not"
    if not parts.hostname or "*" in parts.netloc or not HOST_PATTERN.fullmatch(parts.netloc):
        return f"must name a host, and `{value}` does not"
    if port == 0:
        return "must not name port 0"
    if parts.path not in ("", "/") or parts.query or parts.fragment or value.endswith(("?", "#")):
        return ("must be the agent's origin with no path, query or fragment (the card is "
                "read at `card_path` on it)")
    return None


def _card_path(value: str) -> str:
    segments = unquote(value).split("/")
    bad = None
    if not value.startswith("/") or value.startswith("//"):
        bad = "must start with one `/`"
    elif len(value) > MAX_CARD_PATH_LENGTH:
        bad = f"is longer than {MAX_CARD_PATH_LENGTH} characters"
    elif "?" in value or "#" in value:
        bad = "must not hold a query or a fragment"
    elif ".." in segments or "." in segments or "\\" in unquote(value):
        bad = "must not hold `.` or `..` segments or backslashes"
    elif not value.isascii() or not value.isprintable() or " " in value:
        bad = "must be printable ASCII with no spaces"
    return checked(None if bad is None else f"{bad}, and `{value}` does not fit",
                   f"write an absolute path on the agent, such as `{DEFAULT_CARD_PATH}` "
                   "(the default)", value)


def _a2a_command(value: list[str]) -> list[str]:
    if not value:
        raise refuse("must not be empty",
                     'write the program and its arguments, such as `[python3, server.py, '
                     '--port, "{port}"]`')
    return value


def header_variables(value: str) -> list[str]:
    """The names of the ``${VAR}`` references in a header value, in order."""
    return [match.group(1) for match in _VARIABLE.finditer(value)]


def _header_problem(name: str, value: str) -> tuple[str, str] | None:
    """Why ``name: value`` cannot be an upstream header, as ``(problem, fix)``; the value
    itself is never quoted (it may hold a secret)."""
    lower = name.lower()
    if len(name) > MAX_HEADER_NAME_LENGTH or not _HEADER_NAME.fullmatch(name):
        return (f"is not a valid HTTP header name (at most {MAX_HEADER_NAME_LENGTH} "
                "letters, digits and any of !#$%&'*+-.^_`|~; no space or colon)",
                "write a header name such as `X-Api-Key`")
    if lower in RESERVED_HEADERS or lower.startswith(_RESERVED_PREFIX):
        return ("is a header the door writes itself or that frames the relayed request",
                "remove it; the door sends `A2A-Version: 1.0` and the request's own framing")
    return _header_value_problem(value)


def _header_value_problem(value: str) -> tuple[str, str] | None:
    literal = _VARIABLE.sub("", value)
    fix = ("write printable text with no line break, at most "
           f"{MAX_HEADER_VALUE_LENGTH} characters, and `${{VAR}}` for what the environment "
           "supplies")
    if len(value) > MAX_HEADER_VALUE_LENGTH or not _HEADER_VALUE.fullmatch(value):
        return ("has a value with a line break, a control character or non-ASCII text, or "
                f"longer than {MAX_HEADER_VALUE_LENGTH} characters", fix)
    if value != value.strip(" \t"):
        return "has a value that starts or ends with white space (lost on the wire)", fix
    if "${" in literal:
        return ("has a `${` that does not start a `${VAR}` reference",
                "write `${NAME}` with NAME a variable of `capabilities.env.allow`")
    bad_names = [name for name in header_variables(value) if not ENV_NAME_PATTERN.fullmatch(name)]
    if bad_names:
        return (f"refers to `${{{bad_names[0]}}}`, which is not an environment variable "
                "name", "use letters, digits and `_`, not starting with a digit")
    if redact(literal) != literal:
        return ("has a credential written into murmur.yaml",
                "put the credential in an environment variable and write `${VAR}`, with VAR "
                "in `capabilities.env.allow`")
    return None


def _headers(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_UPSTREAM_HEADERS:
        raise refuse(f"has {len(value)} headers, more than {MAX_UPSTREAM_HEADERS}",
                     f"send at most {MAX_UPSTREAM_HEADERS} headers")
    seen: dict[str, str] = {}
    for name, text in value.items():
        fault = _header_problem(name, text)
        if fault is not None:
            raise refuse_below(name, *fault)
        if name.lower() in seen:
            raise refuse_below(name, f"repeats the header `{seen[name.lower()]}` (header "
                               "names are compared without case)", "write each header once")
        seen[name.lower()] = name
    return value


def _expand_header(name: str, value: str, environ: Mapping[str, str]) -> str:
    def variable(match: re.Match[str]) -> str:
        found = environ.get(match.group(1))
        if found is None:
            raise UpstreamHeaderError(
                f"agent.a2a.headers.{name} needs the environment variable "
                f"{match.group(1)}, which is not set; set it for the member")
        return found

    expanded = _VARIABLE.sub(variable, value)
    if len(expanded) > MAX_HEADER_VALUE_LENGTH or not _HEADER_VALUE.fullmatch(expanded):
        names = ", ".join(header_variables(value))
        raise UpstreamHeaderError(
            f"agent.a2a.headers.{name}: the value of {names} has a line break, a control "
            f"character or non-ASCII text, or is longer than {MAX_HEADER_VALUE_LENGTH} "
            "characters, so it cannot be sent as a header; correct the variable")
    return expanded



class A2aAgent(Strict):
    """``agent.a2a``: an A2A server the door stands in front of (docs/gateway.md)."""

    command: Annotated[list[NonBlank], AfterValidator(_a2a_command)] | None = Field(
        default=None, description='the server to start, such as `[python3, server.py, --port, '
        '"{port}"]`')
    url: Annotated[str, AfterValidator(_upstream_url)] | None = Field(
        default=None, description="the address of an agent that already runs, such as "
        "`http://10.0.0.5:9999`")
    card_path: Annotated[str, AfterValidator(_card_path)] = Field(
        default=DEFAULT_CARD_PATH, description=f"an absolute path such as `{DEFAULT_CARD_PATH}`")
    headers: Annotated[dict[str, str], AfterValidator(_headers)] = Field(
        default_factory=dict, description="header name to value, sent upstream; `${VAR}` from "
        "`capabilities.env.allow`")

    @model_validator(mode="after")
    def _one_source(self) -> A2aAgent:
        if (self.command is None) == (self.url is None):
            raise refuse("must have exactly one of `command` and `url`",
                         'write `command: [program, args...]` (`"{port}"` stands for the port '
                         "the runtime picks) to have the runtime start the server, or `url: "
                         "http://host:port` for an agent that already runs")
        return self

    def command_for(self, port: int) -> list[str]:
        """``command`` with ``{port}`` replaced by ``port`` in every argument."""
        if self.command is None:
            raise ValueError("agent.a2a has a url, not a command")
        text = str(port)
        return [argument.replace(PORT_PLACEHOLDER, text) for argument in self.command]

    def header_references(self) -> list[tuple[str, str]]:
        """Each ``(header, VAR)`` that a header value refers to, in order."""
        return [(name, variable) for name, value in self.headers.items()
                for variable in header_variables(value)]

    def expand_headers(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The headers to send upstream, each ``${VAR}`` replaced by ``environ[VAR]``.

        Raises :class:`UpstreamHeaderError` naming the header and the variable when one is
        not set or its value cannot be sent in a header (a line break, say)."""
        return {name: _expand_header(name, value, environ)
                for name, value in self.headers.items()}

    def card_url(self, base: str | None = None) -> str:
        """The card's URL on ``base`` (``http://127.0.0.1:PORT`` of a started command), or
        on ``url`` when ``base`` is not given."""
        origin = base if base is not None else self.url
        if origin is None:
            raise ValueError("agent.a2a has a command: give the base it listens on")
        return origin.rstrip("/") + self.card_path
