"""The field rules every part of ``murmur.yaml`` shares, and :class:`Strict`, the base of
every manifest mapping (docs/admission.md).

Each rule is an annotated type whose validator refuses a value with a ``problem`` and a
``fix`` (``murmur_value``, which ``schema_faults.py`` turns into ``E-MAN-001``). In order:
the patterns, why a value is not a name, a version or an origin (a media type's reason
is the door's own, :func:`gateway.door.media_types.media_type_problem`) (also read by the roster,
the store and ``mur new``), the refusals, each field's rule, the annotated types, then
:class:`Strict`.
"""

from __future__ import annotations

import keyword
import re
import typing
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from gateway.door.media_types import media_type_problem
from gateway.protocol import MEMBER_NAME_RE
from launcher.durations import DURATION_FORMS, parse_duration

VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
FLOATING_VERSIONS = frozenset({"latest", "stable", "edge"})
JWT_ALGORITHMS = ("EdDSA", "ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256",
                  "PS384", "PS512")
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_PYTHON_ENTRY = re.compile(rf"{_IDENTIFIER}(\.{_IDENTIFIER})*:{_IDENTIFIER}")
HOST_PATTERN = re.compile(
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


def refuse(problem: str, fix: str) -> PydanticCustomError:
    """A refusal of the value being validated: ``problem`` and ``fix`` in words."""
    return PydanticCustomError("murmur_value", "{problem}", {"problem": problem, "fix": fix})


def refuse_below(key: str, problem: str, fix: str) -> PydanticCustomError:
    """A refusal of the entry ``key`` of the mapping being validated."""
    return PydanticCustomError("murmur_value", "{problem}",
                               {"problem": problem, "fix": fix, "below": (key,)})


def checked(problem: str | None, fix: str, value: str) -> str:
    """``value``, or the refusal of ``problem`` when there is one."""
    if problem is not None:
        raise refuse(problem, fix)
    return value


def _name(value: str) -> str:
    return checked(name_problem(value), "use lower-case letters, digits and `-`, starting with "
                   "a letter, at most 32 characters", value)


def _version(value: str) -> str:
    return checked(version_problem(value), "give an exact version such as 1.2.0", value)


def _env_name(value: str) -> str:
    return checked(None if ENV_NAME_PATTERN.fullmatch(value) else
                   f"must be an environment variable name, and `{value}` is not",
                   "use letters, digits and `_`, not starting with a digit", value)


def _host(value: str) -> str:
    return checked(None if HOST_PATTERN.fullmatch(value) else
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
    if not rest or any(mark in rest for mark in "/?#@") or not HOST_PATTERN.fullmatch(rest):
        return (f"must be an origin (scheme, host and optional port, nothing after), and "
                f"`{value}` is not")
    if value != value.lower():
        return f"must be written in lower case as browsers send it, and `{value}` is not"
    return None


def _origin(value: str) -> str:
    return checked(origin_problem(value), "write each origin as a browser sends it in its "
                   "`Origin` header, such as `http://localhost:5173` (no path, no trailing `/`), "
                   "or `*` for any origin", value)


def _media_type(value: str) -> str:
    return checked(media_type_problem(value), "write a media type as `type/subtype`, such as "
                   "`text/plain`, `application/json` or `image/*` (`*/*` takes any part)",
                   value)


def _requirement(value: str) -> str:
    from packaging.requirements import InvalidRequirement
    from packaging.requirements import Requirement as Parsed

    try:
        Parsed(value)
    except InvalidRequirement:
        raise refuse(f"must be a pip requirement, and `{value}` is not",
                     "write a distribution name, optionally with a version, such as "
                     "`httpx>=0.27` or `openai`") from None
    return value


def _non_blank(value: str) -> str:
    return checked("must not be blank" if not value.strip() else None, "write a value", value)


def _relative_file(value: str) -> str:
    path = PurePosixPath(value)
    bad = (not value.strip() or path.is_absolute() or ".." in path.parts or "\\" in value
           or "\x00" in value)
    return checked(f"must be a path inside the capsule, and `{value}` is not" if bad else None,
                   "give a path relative to the directory holding murmur.yaml, without `..`",
                   value)


def _absolute_path(value: str) -> str:
    path = PurePosixPath(value)
    bad = (not value.strip() or not path.is_absolute() or ".." in path.parts or "\x00" in value
           or path == PurePosixPath("/"))
    return checked(f"must be an absolute path below `/`, and `{value}` is not" if bad else None,
                   "give the folder or file the agent reads, such as `/opt/models` or "
                   "`/srv/venvs/adk`", value)


def _python_entry(value: str) -> str:
    ok = _PYTHON_ENTRY.fullmatch(value) and not any(
        keyword.iskeyword(part) for part in re.split(r"[.:]", value))
    return checked(None if ok else f"must be `module:callable`, and `{value}` is not",
                   "write the module and the async function, such as `coder_agent:run`", value)


def _algorithm(value: str) -> str:
    if value.upper().startswith("HS") or value.lower() == "none":
        raise refuse(f"is `{value}`: a door verifies JWTs with a public key, so symmetric "
                     "algorithms and `none` are not accepted",
                     f"use one of {', '.join(JWT_ALGORITHMS)}")
    return checked(None if value in JWT_ALGORITHMS else f"is `{value}`, not an algorithm murmur "
                   "verifies", f"use one of {', '.join(JWT_ALGORITHMS)}", value)


def _duration(value: object) -> int:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise refuse(str(exc), f"write {DURATION_FORMS}") from None


def _first_version(value: int) -> int:
    if value != 1:
        raise refuse(f"must be 1, not {value}", "write `manifest_version: 1`")
    return value


Name = Annotated[str, AfterValidator(_name)]
Version = Annotated[str, AfterValidator(_version)]
EnvName = Annotated[str, AfterValidator(_env_name)]
Host = Annotated[str, AfterValidator(_host)]
WebOrigin = Annotated[str, AfterValidator(_origin)]
Requirement = Annotated[str, AfterValidator(_requirement)]
MediaType = Annotated[str, AfterValidator(_media_type)]
NonBlank = Annotated[str, AfterValidator(_non_blank)]
RelativeFile = Annotated[str, AfterValidator(_relative_file)]
AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]
Algorithm = Annotated[str, AfterValidator(_algorithm)]
PythonEntry = Annotated[str, AfterValidator(_python_entry)]
ManifestVersion = Annotated[int, AfterValidator(_first_version)]
TaskScope = Literal["SendMessage", "SendStreamingMessage", "GetTask", "CancelTask",
                    "ListTasks", "SubscribeToTask"]
#: A scope: a task method, or ``Metrics`` (``GET /metrics``, docs/metrics.md) or a push
#: configuration method (docs/push.md), which a credential has only when it names it.
Scope = Literal["SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "ListTasks",
                "SubscribeToTask", "Metrics", "CreateTaskPushNotificationConfig",
                "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
                "DeleteTaskPushNotificationConfig"]
#: Every task method: the scopes of a declared credential that names none.
TASK_SCOPES: tuple[Scope, ...] = typing.get_args(TaskScope)
#: Seconds, written as ``10m``, ``7d``... or a whole number of seconds.
Duration = Annotated[int, BeforeValidator(_duration)]


class Strict(BaseModel):
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
