"""A capsule's ``murmur.yaml``: the manifest model, read with :mod:`launcher.admission.yaml_files`.

The manifest schema as pydantic models that refuse any key they do not list
(``E-MAN-001``, naming the key's dotted path) and a door requiring authentication beside
a non-empty ``capabilities.spawn.allow`` (``E-MAN-003``).

In order: the shared field rules, the rules of a gateway member (``agent.a2a``: its
command, url, card path and upstream headers), the models from ``Skill`` to ``Manifest``,
schema faults as diagnostics, then reading and the files a manifest names.
"""

from __future__ import annotations

import keyword
import re
import typing
from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gateway.protocol import MEMBER_NAME_RE
from gateway.redaction import redact
from launcher.admission.yaml_files import (
    Location,
    YamlFault,
    describe_value,
    dotted,
    read_text_file,
    read_yaml,
    suggest,
)
from launcher.diagnostics import DiagnosticError
from launcher.durations import DURATION_FORMS, parse_duration
from launcher.errors import LauncherError

# --- Shared field rules ------------------------------------------------------------------

VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
FLOATING_VERSIONS = frozenset({"latest", "stable", "edge"})
JWT_ALGORITHMS = ("EdDSA", "ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256",
                  "PS384", "PS512")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_PYTHON_ENTRY = re.compile(rf"{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}")
_HOST = re.compile(
    r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")


def name_problem(value: str) -> str | None:
    """Why ``value`` is not a name (member, capsule, scope, credential), or ``None``."""
    if MEMBER_NAME_RE.fullmatch(value):
        return None
    return f"must match {MEMBER_NAME_RE.pattern}, and `{value}` does not"


def version_problem(value: str) -> str | None:
    """Why ``value`` is not an exact version, or ``None``."""
    if not value.strip():
        return "must not be blank"
    if value.strip().lower() in FLOATING_VERSIONS:
        return f"must be an exact version, not `{value}`"
    if not VERSION_PATTERN.fullmatch(value):
        return (f"must be letters, digits, `.`, `_`, `+` and `-`, starting with a letter or a "
                f"digit, and `{value}` is not")
    return None


def _refuse(problem: str, fix: str) -> PydanticCustomError:
    return PydanticCustomError("murmur_value", "{problem}", {"problem": problem, "fix": fix})


def _check(problem: str | None, fix: str, value: str) -> str:
    if problem is not None:
        raise _refuse(problem, fix)
    return value


def _name(value: str) -> str:
    return _check(name_problem(value), "use lower-case letters, digits and `-`, starting with "
                  "a letter, at most 32 characters", value)


def _version(value: str) -> str:
    return _check(version_problem(value), "give an exact version such as 1.2.0", value)


def _env_name(value: str) -> str:
    return _check(None if _ENV_NAME.fullmatch(value) else
                  f"must be an environment variable name, and `{value}` is not",
                  "use letters, digits and `_`, not starting with a digit", value)


def _host(value: str) -> str:
    return _check(None if _HOST.fullmatch(value) else
                  f"must be a host name or address, and `{value}` is not",
                  "write a bare host such as `localhost` or `api.example.com` (optionally "
                  "`:port`), with no scheme or path", value)


def origin_problem(value: str) -> str | None:
    """Why ``value`` is not a web origin a door may allow (``*``, or ``scheme://host`` with
    an optional port, nothing after it), or ``None``."""
    if value == "*":
        return None
    scheme, separator, rest = value.partition("://")
    if not separator or scheme not in ("http", "https"):
        return f"must be `*` or an origin such as `http://localhost:5173`, and `{value}` is not"
    if not rest or any(mark in rest for mark in "/?#@") or not _HOST.fullmatch(rest):
        return (f"must be an origin (scheme, host and optional port, nothing after), and "
                f"`{value}` is not")
    if value != value.lower():
        return f"must be written in lower case as browsers send it, and `{value}` is not"
    return None


def _origin(value: str) -> str:
    return _check(origin_problem(value), "write each origin as a browser sends it in its "
                  "`Origin` header, such as `http://localhost:5173` (no path, no trailing `/`), "
                  "or `*` for any origin", value)


def _requirement(value: str) -> str:
    from packaging.requirements import InvalidRequirement
    from packaging.requirements import Requirement as Parsed

    try:
        Parsed(value)
    except InvalidRequirement:
        raise _refuse(f"must be a pip requirement, and `{value}` is not",
                      "write a distribution name, optionally with a version, such as "
                      "`httpx>=0.27` or `openai`") from None
    return value


def _non_blank(value: str) -> str:
    return _check("must not be blank" if not value.strip() else None, "write a value", value)


def _relative_file(value: str) -> str:
    path = PurePosixPath(value)
    bad = (not value.strip() or path.is_absolute() or ".." in path.parts or "\\" in value
           or "\x00" in value)
    return _check(f"must be a path inside the capsule, and `{value}` is not" if bad else None,
                  "give a path relative to the directory holding murmur.yaml, without `..`",
                  value)


def _python_entry(value: str) -> str:
    ok = _PYTHON_ENTRY.fullmatch(value) and not any(
        keyword.iskeyword(part) for part in re.split(r"[.:]", value))
    return _check(None if ok else f"must be `module:callable`, and `{value}` is not",
                  "write the module and the async function, such as `coder_agent:run`", value)


def _algorithm(value: str) -> str:
    if value.upper().startswith("HS") or value.lower() == "none":
        raise _refuse(f"is `{value}`: a door verifies JWTs with a public key, so symmetric "
                      "algorithms and `none` are not accepted",
                      f"use one of {', '.join(JWT_ALGORITHMS)}")
    return _check(None if value in JWT_ALGORITHMS else f"is `{value}`, not an algorithm murmur "
                  "verifies", f"use one of {', '.join(JWT_ALGORITHMS)}", value)


def _duration(value: object) -> int:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise _refuse(str(exc), f"write {DURATION_FORMS}") from None


def _first_version(value: int) -> int:
    if value != 1:
        raise _refuse(f"must be 1, not {value}", "write `manifest_version: 1`")
    return value


Name = Annotated[str, AfterValidator(_name)]
Version = Annotated[str, AfterValidator(_version)]
EnvName = Annotated[str, AfterValidator(_env_name)]
Host = Annotated[str, AfterValidator(_host)]
WebOrigin = Annotated[str, AfterValidator(_origin)]
Requirement = Annotated[str, AfterValidator(_requirement)]
NonBlank = Annotated[str, AfterValidator(_non_blank)]
RelativeFile = Annotated[str, AfterValidator(_relative_file)]
Algorithm = Annotated[str, AfterValidator(_algorithm)]
TaskScope = Literal["SendMessage", "SendStreamingMessage", "GetTask", "CancelTask",
                    "ListTasks", "SubscribeToTask"]
#: A scope: a task method, or ``Metrics`` (``GET /metrics``, docs/metrics.md), which a
#: credential has only when it names it.
Scope = Literal["SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "ListTasks",
                "SubscribeToTask", "Metrics"]
#: Every task method: the scopes of a declared credential that names none.
TASK_SCOPES: tuple[Scope, ...] = typing.get_args(TaskScope)
#: Seconds, written as ``10m``, ``7d``... or a whole number of seconds.
Duration = Annotated[int, BeforeValidator(_duration)]


# --- A gateway member's rules (agent.a2a) ------------------------------------------------

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
        raise _refuse("holds `{port}`, which only `agent.a2a.command` may use: a `url` "
                      "names an agent that already runs on a port of its own",
                      "write the agent's real port, or use `command` to have the runtime "
                      "start it on a free port")
    problem = _url_problem(value)
    return _check(problem, fix, value)


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
    if not parts.hostname or "*" in parts.netloc or not _HOST.fullmatch(parts.netloc):
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
    return _check(None if bad is None else f"{bad}, and `{value}` does not fit",
                  f"write an absolute path on the agent, such as `{DEFAULT_CARD_PATH}` "
                  "(the default)", value)


def _a2a_command(value: list[str]) -> list[str]:
    if not value:
        raise _refuse("must not be empty",
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
    bad_names = [name for name in header_variables(value) if not _ENV_NAME.fullmatch(name)]
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
        raise _refuse(f"has {len(value)} headers, more than {MAX_UPSTREAM_HEADERS}",
                      f"send at most {MAX_UPSTREAM_HEADERS} headers")
    seen: dict[str, str] = {}
    for name, text in value.items():
        fault = _header_problem(name, text)
        if fault is not None:
            raise _refuse_below(name, *fault)
        if name.lower() in seen:
            raise _refuse_below(name, f"repeats the header `{seen[name.lower()]}` (header "
                                "names are compared without case)", "write each header once")
        seen[name.lower()] = name
    return value


def _refuse_below(key: str, problem: str, fix: str) -> PydanticCustomError:
    """A refusal of the entry ``key`` of the mapping being validated."""
    return PydanticCustomError("murmur_value", "{problem}",
                               {"problem": problem, "fix": fix, "below": (key,)})


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


# --- The manifest ------------------------------------------------------------------------

class _Strict(BaseModel):
    """Every manifest mapping: unknown keys refused, no type coercion, immutable.

    A key written with no value (``idle_timeout:``) is the same as an absent key.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _absent_when_empty(cls, data: Any) -> Any:
        if isinstance(data, dict):
            cls._refuse_empty(data)
            return {key: value for key, value in data.items() if value is not None}
        return data

    @classmethod
    def _refuse_empty(cls, data: Mapping[str, Any]) -> None:
        """Hook for the keys where an empty value is refused rather than read as absent."""


class Skill(_Strict):
    id: NonBlank
    name: NonBlank
    description: str = ""
    tags: list[str] = Field(default_factory=list)


class A2aAgent(_Strict):
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
            raise _refuse("must have exactly one of `command` and `url`",
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


class Agent(_Strict):
    python: Annotated[str, AfterValidator(_python_entry)] | None = Field(
        default=None, description="`module:callable`, an `async def run(task)` inside the capsule")
    command: list[NonBlank] | None = Field(
        default=None, min_length=1, description="a process harness, such as `[python3, run.py]`")
    a2a: A2aAgent | None = Field(
        default=None, description="an A2A server behind the door: `command: [...]` or `url: ...`")
    skills: list[Skill] = Field(default_factory=list)
    requires: list[Requirement] = Field(
        default_factory=list, description="Python distributions the agent needs, as pip "
        "requirement strings such as `httpx>=0.27`")

    @model_validator(mode="after")
    def _one_kind(self) -> Agent:
        if [self.python, self.command, self.a2a].count(None) != 2:
            raise _refuse("must have exactly one of `python`, `command` and `a2a`",
                          "write `python: module:run` for a Python agent, `command: "
                          "[program, args...]` for a process harness, or `a2a: {command: "
                          "[...]}` or `a2a: {url: ...}` for an A2A server behind the door")
        if self.a2a is not None and self.skills:
            raise _refuse_below("skills", "cannot be given beside `agent.a2a`: the door's "
                                "card shows the upstream's own skills",
                                "remove `agent.skills`; the upstream's card lists its skills")
        ids = [skill.id for skill in self.skills]
        if len(ids) != len(set(ids)):
            raise _refuse("gives two skills the same `id`", "give each skill its own `id`")
        return self

    @property
    def module(self) -> str | None:
        """The module of a ``python`` agent (``coder_agent`` for ``coder_agent:run``)."""
        return None if self.python is None else self.python.split(":", 1)[0]

    @property
    def function(self) -> str | None:
        """The callable of a ``python`` agent (``run`` for ``coder_agent:run``)."""
        return None if self.python is None else self.python.split(":", 1)[1]

    @property
    def kind(self) -> Literal["python", "command", "a2a"]:
        """Which of the three kinds the agent is."""
        if self.python is not None:
            return "python"
        return "command" if self.command is not None else "a2a"


class PeerTasks(_Strict):
    accept: bool = Field(default=False, description="`true` to serve tasks from other members")


class Exports(_Strict):
    peer_tasks: PeerTasks = Field(default_factory=PeerTasks)


def _all_scopes() -> list[Scope]:
    return list(TASK_SCOPES)


class BearerCredential(_Strict):
    name: Name
    env: EnvName = Field(description="the environment variable holding the token")
    scopes: list[Scope] = Field(default_factory=_all_scopes, min_length=1)


class JwtIssuer(_Strict):
    name: Name
    issuer: NonBlank
    audience: NonBlank
    jwks_file: RelativeFile | None = None
    pem_file: RelativeFile | None = None
    algorithms: list[Algorithm] = Field(min_length=1)
    scopes: list[Scope] = Field(default_factory=_all_scopes, min_length=1)

    @model_validator(mode="after")
    def _one_key_source(self) -> JwtIssuer:
        if (self.jwks_file is None) == (self.pem_file is None):
            raise _refuse("must have exactly one of `jwks_file` and `pem_file`",
                          "name the issuer's public keys in one file inside the capsule")
        return self


def _unique_names(items: list[BearerCredential] | list[JwtIssuer], kind: str) -> None:
    names = [item.name for item in items]
    for name in names:
        if names.count(name) > 1:
            raise _refuse(f"names two {kind} credentials `{name}`",
                          "give each credential its own name")


class Authentication(_Strict):
    bearer: list[BearerCredential] = Field(default_factory=list)
    jwt: list[JwtIssuer] = Field(default_factory=list)

    @model_validator(mode="after")
    def _distinct(self) -> Authentication:
        _unique_names(self.bearer, "bearer")
        _unique_names(self.jwt, "jwt")
        return self


class Cors(_Strict):
    allow_origins: list[WebOrigin] = Field(
        default_factory=list, description="web origins whose pages may call the door")


class Network(_Strict):
    authentication: Authentication | None = Field(
        default=None, description="absent for a public door; `{}` for a door that accepts only the "
        "operator token and formation tokens")
    cors: Cors = Field(default_factory=Cors)
    public_card: bool = Field(
        default=False, description="serve the agent card, without the session extension, "
        "to callers with no credential")

    @classmethod
    def _refuse_empty(cls, data: Mapping[str, Any]) -> None:
        # Absent means a public door; an empty value is too easily meant as `{}`.
        if "authentication" in data and data["authentication"] is None:
            raise _refuse("has `authentication:` written with no value",
                          "write `authentication: {}` for a door that accepts only the "
                          "operator and formation tokens, or remove the key for a public door")


class NetworkGrant(_Strict):
    allow: list[Host] = Field(default_factory=list)


class SpawnGrant(_Strict):
    allow: list[NonBlank] = Field(default_factory=list)


class EnvGrant(_Strict):
    allow: list[EnvName] = Field(default_factory=list)


class Capabilities(_Strict):
    network: NetworkGrant = Field(default_factory=NetworkGrant)
    spawn: SpawnGrant = Field(default_factory=SpawnGrant)
    env: EnvGrant = Field(default_factory=EnvGrant)


class Lifecycle(_Strict):
    task_acceptance: Literal["single", "queue"] = "queue"
    after_task: Literal["exit", "sleep"] = "sleep"
    concurrency: int = Field(default=1, ge=1, le=1024, description="tasks run at once")
    queue_depth: int = Field(default=0, ge=0, le=100_000,
                             description="tasks held waiting beyond those running")
    idle_timeout: Duration | None = None

    @property
    def holds(self) -> int:
        """Tasks the member holds at once: those running plus those queued."""
        return self.concurrency + self.queue_depth


class Inference(_Strict):
    max_turns: int = Field(default=8, ge=1, le=1000)


class Retain(_Strict):
    max_sessions: int | None = Field(default=None, ge=1)
    max_age: Duration | None = None


class Trace(_Strict):
    retain: Retain = Field(default_factory=Retain)


class Manifest(_Strict):
    """A capsule's ``murmur.yaml`` (docs/admission.md). Durations are in seconds."""

    manifest_version: Annotated[int, AfterValidator(_first_version)] = Field(
        description="`1`")
    name: Name = Field(description="the capsule's name, such as `coder`")
    version: Version = Field(description="the capsule's exact version, such as `1.2.0`")
    description: str = ""
    agent: Agent = Field(description="`python: module:run`, `command: [...]` or `a2a: {...}`")
    exports: Exports = Field(default_factory=Exports)
    network: Network = Field(default_factory=Network)
    capabilities: Capabilities = Field(default_factory=Capabilities)
    lifecycle: Lifecycle = Field(default_factory=Lifecycle)
    inference: Inference = Field(default_factory=Inference)
    trace: Trace = Field(default_factory=Trace)

    @model_validator(mode="after")
    def _spawn_without_authentication(self) -> Manifest:
        if self.network.authentication is not None and self.capabilities.spawn.allow:
            raise PydanticCustomError("spawn_beside_authentication", "{spawn}",
                                      {"spawn": ", ".join(self.capabilities.spawn.allow)})
        return self

    @model_validator(mode="after")
    def _header_variables_granted(self) -> Manifest:
        # Only the granted environment reaches the upstream, so a header may use no other.
        a2a, allowed = self.agent.a2a, set(self.capabilities.env.allow)
        for name, variable in a2a.header_references() if a2a is not None else ():
            if variable not in allowed:
                raise PydanticCustomError("murmur_value", "{problem}", {
                    "problem": f"refers to `${{{variable}}}`, which `capabilities.env.allow` "
                               "does not name", "fix": f"add {variable} to "
                    "capabilities.env.allow", "below": ("agent", "a2a", "headers", name)})
        return self

    @property
    def serves_peers(self) -> bool:
        return self.exports.peer_tasks.accept

    @property
    def authenticated(self) -> bool:
        return self.network.authentication is not None


# --- Schema faults as diagnostics --------------------------------------------------------

_TYPE_WORDS = {
    "string_type": "text", "int_type": "a whole number", "float_type": "a number",
    "bool_type": "`true` or `false`", "list_type": "a list", "dict_type": "a mapping",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "int_from_float": "a "
    "whole number", "literal_error": "one of {expected}",
}


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _nested_model(argument)
        if found is not None:
            return found
    return None


def model_at(model: type[BaseModel], location: Location) -> type[BaseModel] | None:
    """The model class validating the mapping at ``location`` below ``model``."""
    current: type[BaseModel] | None = model
    for part in location:
        if isinstance(part, int):
            continue
        if current is None or part not in current.model_fields:
            return None
        current = _nested_model(current.model_fields[part].annotation)
    return current


def schema_fault(exc: ValidationError, model: type[BaseModel], document: str
                 ) -> tuple[str, str, str, str]:
    """The first fault of ``exc`` as ``(error type, path, problem, fix)``.

    ``document`` names the file kind in sentences (``murmur.yaml``).
    """
    error = exc.errors(include_url=False)[0]
    location: Location = tuple(error["loc"])
    path = dotted(location)
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    field = model_at(model, location[:-1]) if location else None
    key = location[-1] if location else ""
    description = ""
    if field is not None and isinstance(key, str) and key in field.model_fields:
        description = field.model_fields[key].description or ""
    if kind == "extra_forbidden":
        accepted = sorted(field.model_fields) if field is not None else []
        where = f"under `{dotted(location[:-1])}`" if len(location) > 1 else "at the top"
        close = suggest(str(key), accepted)
        return kind, path, f"`{path}` is not a key {document} accepts", (
            f"{close[2:] + ' ' if close else 'remove it; '}the keys {where} are "
            f"{', '.join(accepted)}")
    if kind == "missing":
        return kind, path, f"`{path}` is required", (
            f"add `{key}`" + (f": {description}" if description else ""))
    if kind == "murmur_value":
        # A rule of a whole mapping may name the entry at fault below the error's location.
        path = dotted(location + tuple(ctx.get("below", ())))
        problem = str(ctx.get("problem", error["msg"]))
        if path:
            problem = f"`{path}` {problem}"
        return kind, path, problem, str(ctx.get("fix", "correct it"))
    if kind == "spawn_beside_authentication":
        return kind, path, str(ctx.get("spawn", "")), ""
    if kind in _TYPE_WORDS:
        wanted = _TYPE_WORDS[kind].format(expected=ctx.get("expected", ""))
        return kind, path, f"`{path}` must be {wanted}, not {describe_value(value)}", (
            f"write {wanted}" + (f" ({description})" if description else ""))
    limits = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("more than", "gt"), "less_than": ("less than", "lt")}
    if kind in limits:
        words, bound = limits[kind]
        return kind, path, f"`{path}` must be {words} {ctx.get(bound)}, not {value}", (
            f"write a value {words} {ctx.get(bound)}")
    if kind == "too_short":
        return kind, path, (f"`{path}` must have at least {ctx.get('min_length')} "
                            "item(s)"), "add an item"
    return kind, path, f"`{path or 'the document'}` {error['msg'].lower()}", "correct it"


def _manifest_from_data(data: Any, source: str) -> Manifest:
    if data is None:
        raise DiagnosticError("E-MAN-002", source, file=source, problem="is empty",
                              fix="write the capsule's manifest; `mur new DIR` writes one")
    if not isinstance(data, dict):
        raise DiagnosticError("E-MAN-002", source, file=source,
                              problem=f"must hold a mapping of keys at its top, not "
                                      f"{describe_value(data)}",
                              fix="start with `manifest_version: 1`, `name:` and `version:`")
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        kind, path, problem, fix = schema_fault(exc, Manifest, "murmur.yaml")
        if kind == "spawn_beside_authentication":
            raise DiagnosticError("E-MAN-003", "capabilities.spawn.allow", file=source,
                                  spawn=problem) from None
        raise DiagnosticError("E-MAN-001", path or source, file=source, problem=problem,
                              fix=fix) from None


def parse_manifest(text: bytes | str, source: str = "murmur.yaml") -> Manifest:
    """The manifest in ``text``; ``source`` names it in diagnostics.

    Raises :class:`DiagnosticError`: ``E-MAN-002`` when it does not read as YAML,
    ``E-MAN-001`` for a key or value the schema refuses, ``E-MAN-003`` for
    ``network.authentication`` beside a non-empty ``capabilities.spawn.allow``.
    """
    try:
        data = read_yaml(text, text_paths=(("version",),))
    except YamlFault as fault:
        raise DiagnosticError("E-MAN-002", dotted(fault.location) or source, file=source,
                              problem=fault.problem, fix=fault.fix) from None
    return _manifest_from_data(data, source)


def load_manifest(source: Path | str | bytes) -> Manifest:
    """A manifest from a file (a capsule directory means its ``murmur.yaml``) or from text.

    A ``str`` is a path when it has no newline and names an existing file or directory;
    otherwise it is the manifest's text.
    """
    if isinstance(source, bytes):
        return parse_manifest(source)
    if isinstance(source, str) and ("\n" in source or not Path(source).exists()):
        return parse_manifest(source)
    path = Path(source)
    if path.is_dir():
        path = path / "murmur.yaml"
    try:
        data = read_text_file(path)
    except FileNotFoundError:
        raise DiagnosticError("E-MAN-002", str(path), file=str(path), problem="does not exist",
                              fix="write the capsule's murmur.yaml; `mur new DIR` writes "
                                  "one") from None
    except OSError as exc:
        raise DiagnosticError("E-MAN-002", str(path), file=str(path),
                              problem=f"cannot be read ({exc.strerror})",
                              fix="make it a readable file") from None
    return parse_manifest(data, source=str(path))


def referenced_files(manifest: Manifest) -> list[tuple[str, tuple[str, ...]]]:
    """Each file the manifest names, as ``(field, candidate paths)``; one candidate must
    exist inside the capsule for the capsule to work."""
    wanted: list[tuple[str, tuple[str, ...]]] = []
    if manifest.agent.module is not None:
        base = manifest.agent.module.replace(".", "/")
        wanted.append(("agent.python", (f"{base}.py", f"{base}/__init__.py")))
    authentication = manifest.network.authentication
    for index, issuer in enumerate(authentication.jwt if authentication else []):
        for key in ("jwks_file", "pem_file"):
            value = getattr(issuer, key)
            if value is not None:
                normal = str(PurePosixPath(value))
                wanted.append((f"network.authentication.jwt[{index}].{key}", (normal,)))
    return wanted


def check_files(manifest: Manifest, present: Collection[str], source: str) -> None:
    """Refuse, with ``E-MAN-004``, a manifest naming a file not in ``present`` (the
    capsule's files as relative POSIX paths)."""
    for field, candidates in referenced_files(manifest):
        if not any(candidate in present for candidate in candidates):
            raise DiagnosticError("E-MAN-004", field, file=source, field=field,
                                  target=" or ".join(f"`{c}`" for c in candidates))


__all__ = ["A2aAgent", "Agent", "Authentication", "BearerCredential", "Capabilities",
           "JwtIssuer", "Lifecycle", "Manifest", "UpstreamHeaderError", "YamlFault",
           "check_files", "dotted", "load_manifest", "parse_manifest", "read_yaml",
           "referenced_files"]
