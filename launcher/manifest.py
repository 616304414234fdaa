"""A capsule's ``murmur.yaml``: reading murmur's YAML files safely, and the manifest model.

The first half is how every murmur file (``murmur.yaml``, ``roster.yaml``,
``murmur.lock``) is read: bounded in size and depth, UTF-8 only, no anchors, aliases or
custom tags, no duplicate keys, and version fields kept as their source text, so
``version: 1.10`` is ``"1.10"``. The second half is the manifest schema of DESIGN.md
section 4 as pydantic models that refuse any key they do not list (``E-MAN-001``, naming
the key's dotted path) and a door requiring authentication beside a non-empty
``capabilities.spawn.allow`` (``E-MAN-003``).
"""

from __future__ import annotations

import keyword
import re
import typing
from collections.abc import Collection, Mapping
from difflib import get_close_matches
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

import yaml
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
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from gateway.protocol import MEMBER_NAME_RE
from launcher.diagnostics import DiagnosticError
from launcher.durations import DURATION_FORMS, parse_duration

try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml: _LOADER falls back to pure Python
    CParser = None  # type: ignore[assignment,misc]

# --- Reading YAML ------------------------------------------------------------------------

#: No murmur file is anywhere near this; a larger one is refused before it is parsed.
MAX_DOCUMENT_BYTES = 256 * 1024
#: Nesting deeper than this is refused (the composer recurses once per level).
MAX_DEPTH = 64

Location = tuple[str | int, ...]
#: A path pattern for :func:`read_yaml`'s ``text_paths``: keys, with ``"*"`` for any key
#: or list index.
PathPattern = tuple[str, ...]

_TAG = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_TAG}{name}" for name in ("str", "int", "float", "bool", "null",
                                               "timestamp", "merge", "value")}
_NUMBER_LIKE_TAGS = {f"{_TAG}{name}" for name in ("int", "float", "bool", "timestamp")}


class YamlFault(Exception):
    """A document that does not read: ``problem`` says what, ``fix`` what to write."""

    def __init__(self, problem: str, fix: str, location: Location = ()) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.location = location


def dotted(location: Location) -> str:
    """``("members", 1, "name")`` as ``members[1].name``."""
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


class _Refused(yaml.YAMLError):
    def __init__(self, problem: str, fix: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem, self.fix, self.mark = problem, fix, mark


class _Checks(Composer):
    """The composer, refusing anchors, aliases and deep nests as it builds each node.

    Refusing anchors outright (rather than bounding expansion) keeps a billion-laughs
    document as cheap as any other: it stops at its first ``&``.
    """

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[attr-defined]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused("uses an anchor or alias (`&` or `*`), which murmur does not accept",
                           "write each value out in full", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nests deeper than {MAX_DEPTH} levels",
                               "flatten the document", event.start_mark)
            node: yaml.Node | None = super().compose_node(parent, index)
            return node
        finally:
            self._depth -= 1


class _PythonLoader(_Checks, yaml.SafeLoader):
    """PyYAML's own reader, scanner and parser, where libyaml is missing."""


_LOADER: type[_PythonLoader] | type[_LibyamlLoader] = _PythonLoader

if CParser is not None:
    class _LibyamlLoader(_Checks, CParser, SafeConstructor, Resolver):
        """libyaml's parser (six times faster on a large file) under the checking composer."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    _LOADER = _LibyamlLoader


def _decode(data: bytes | str) -> str:
    if isinstance(data, str):
        if len(data) > MAX_DOCUMENT_BYTES:
            raise YamlFault(f"is larger than {MAX_DOCUMENT_BYTES // 1024} KiB",
                            "keep it under that size")
        return data
    if len(data) > MAX_DOCUMENT_BYTES:
        raise YamlFault(f"is {len(data)} bytes, larger than the {MAX_DOCUMENT_BYTES // 1024} "
                        "KiB murmur reads", "keep it under that size")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YamlFault(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                        f"{exc.start})", "save it as UTF-8") from None


def _tab_at(text: str, mark: yaml.Mark | None) -> bool:
    if mark is None:
        return False
    lines = text.splitlines()
    line = lines[mark.line] if 0 <= mark.line < len(lines) else ""
    return "\t" in line[: mark.column + 1]


def _describe_yaml_error(exc: yaml.YAMLError, text: str) -> YamlFault:
    if isinstance(exc, _Refused):
        where = f" at line {exc.mark.line + 1}, column {exc.mark.column + 1}" if exc.mark else ""
        return YamlFault(f"{exc.problem}{where}", exc.fix)
    if isinstance(exc, yaml.reader.ReaderError):
        return YamlFault(f"holds a character YAML does not allow (code point "
                         f"{exc.character!r} at offset {exc.position})",
                         "remove control characters and binary data; save it as UTF-8 text")
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = exc.problem or exc.context or "it does not parse"
        fix = ("indent with spaces, never tabs" if _tab_at(text, mark) or "\\t" in problem
               else "correct the YAML at that place")
        if "expected a single document" in str(exc.context) + str(problem):
            fix = "keep one document in the file (remove the second `---`)"
        return YamlFault(f"does not read as YAML: {where}{problem}", fix)
    return YamlFault("does not read as YAML", "correct the YAML")


def _matches(location: Location, patterns: Collection[PathPattern]) -> bool:
    return any(len(pattern) == len(location) and all(
        want == "*" or want == got for want, got in zip(pattern, location, strict=True))
        for pattern in patterns)


class _Builder:
    """Turns a composed node tree into plain dicts, lists and scalars."""

    def __init__(self, loader: SafeConstructor, text_paths: Collection[PathPattern]) -> None:
        self._loader = loader
        self._text_paths = text_paths

    def value(self, node: yaml.Node, location: Location) -> Any:
        if node.tag.startswith(_TAG) and node.tag[len(_TAG):] in ("map", "seq"):
            pass
        elif node.tag not in _SCALAR_TAGS or not isinstance(node, yaml.ScalarNode):
            tag = "!!" + node.tag[len(_TAG):] if node.tag.startswith(_TAG) else node.tag
            raise YamlFault(f"`{dotted(location) or 'the document'}` has the tag "
                            f"`{tag}`, which murmur does not accept",
                            "remove the `!` tag", location)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, location)
        if isinstance(node, yaml.SequenceNode):
            return [self.value(item, (*location, index))
                    for index, item in enumerate(node.value)]
        assert isinstance(node, yaml.ScalarNode)
        return self._scalar(node, location)

    def _scalar(self, node: yaml.ScalarNode, location: Location) -> Any:
        if node.tag in _NUMBER_LIKE_TAGS and (
                node.tag == f"{_TAG}timestamp" or _matches(location, self._text_paths)):
            # A version is its source text (1.10 stays "1.10"); a date is never wanted.
            return node.value
        if node.tag in (f"{_TAG}merge", f"{_TAG}value"):
            return node.value
        return self._loader.construct_object(node)

    def _mapping(self, node: yaml.MappingNode, location: Location) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag not in _SCALAR_TAGS:
                raise YamlFault(f"`{dotted(location) or 'the document'}` has a key that is not "
                                "plain text", "write keys as plain words", location)
            key = str(key_node.value)
            if key in result:
                raise YamlFault(f"`{dotted((*location, key))}` is written twice",
                                "keep one of them", (*location, key))
            result[key] = self.value(value_node, (*location, key))
        return result


def read_yaml(data: bytes | str, *, text_paths: Collection[PathPattern] = ()) -> Any:
    """The one YAML document in ``data`` as plain Python values, ``None`` when empty.

    Scalars at ``text_paths`` that YAML would read as numbers, booleans or dates are kept
    as their source text. Raises :class:`YamlFault` for anything that does not read.
    """
    text = _decode(data)
    loader: _PythonLoader | _LibyamlLoader | None = None
    try:
        loader = _LOADER(text)  # reads ahead: refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        return _Builder(loader, text_paths).value(node, ())
    except yaml.YAMLError as exc:
        raise _describe_yaml_error(exc, text) from None
    except RecursionError:
        raise YamlFault(f"nests deeper than {MAX_DEPTH} levels", "flatten the document") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text_file(path: Path) -> bytes:
    """The bytes of ``path``, reading no more than one byte past the size murmur accepts."""
    with path.open("rb") as handle:
        return handle.read(MAX_DOCUMENT_BYTES + 1)


def describe_value(value: object) -> str:
    """How a refusal names a value it did not want."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"`{'true' if value else 'false'}`"
    if isinstance(value, int | float):
        return f"the number `{value}`"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the text `{shown}`" if value.strip() else "blank text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def suggest(word: str, choices: Collection[str]) -> str:
    """``; did you mean `x`?`` for a close match, else nothing."""
    close = get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


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
NonBlank = Annotated[str, AfterValidator(_non_blank)]
RelativeFile = Annotated[str, AfterValidator(_relative_file)]
Algorithm = Annotated[str, AfterValidator(_algorithm)]
Scope = Literal["SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "ListTasks",
                "SubscribeToTask"]
#: Every task method: the scopes of a declared credential that names none.
TASK_SCOPES: tuple[Scope, ...] = typing.get_args(Scope)
#: Seconds, written as ``10m``, ``7d``... or a whole number of seconds.
Duration = Annotated[int, BeforeValidator(_duration)]


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


class Agent(_Strict):
    python: Annotated[str, AfterValidator(_python_entry)] | None = Field(
        default=None, description="`module:callable`, an `async def run(task)` inside the capsule")
    command: list[NonBlank] | None = Field(
        default=None, min_length=1, description="a process harness, such as `[python3, run.py]`")
    skills: list[Skill] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_kind(self) -> Agent:
        if (self.python is None) == (self.command is None):
            raise _refuse("must have exactly one of `python` and `command`",
                          "write `python: module:run` for a Python agent, or `command: "
                          "[program, args...]` for a process harness")
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


class Network(_Strict):
    authentication: Authentication | None = Field(
        default=None, description="absent for a public door; `{}` for a door that accepts only the "
        "operator token and formation tokens")

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
    """A capsule's ``murmur.yaml`` (DESIGN.md section 4). Durations are in seconds."""

    manifest_version: Annotated[int, AfterValidator(_first_version)] = Field(
        description="`1`")
    name: Name = Field(description="the capsule's name, such as `coder`")
    version: Version = Field(description="the capsule's exact version, such as `1.2.0`")
    description: str = ""
    agent: Agent = Field(description="`python: module:run` or `command: [...]`")
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


__all__ = ["Agent", "Authentication", "BearerCredential", "Capabilities", "JwtIssuer",
           "Lifecycle", "Manifest", "YamlFault", "check_files", "dotted", "load_manifest",
           "parse_manifest", "read_yaml", "referenced_files"]
