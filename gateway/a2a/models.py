"""A2A 1.0 wire types: pydantic models with camelCase names on the wire.

The models follow ``specification/a2a.proto`` of the A2A 1.0 release as ProtoJSON writes
it: camelCase field names, enums as their proto names (``TASK_STATE_COMPLETED``,
``ROLE_USER``), ``bytes`` as base64, unknown fields ignored (spec section 5.7).

They are used to *validate* what arrives on the wire. What the door sends is built as
plain dicts in that same shape (see :mod:`gateway.door.tasks`), because ``json.dumps`` of a
dict is the cheapest way to answer; :meth:`WireModel.wire` gives the dict of a model.

What a caller chooses and the door keeps is bounded here (docs/door.md, "Protocol"):
every identifier (:data:`Identifier`, at most :data:`IDENTIFIER_LIMIT` characters) and
free-form JSON (``metadata``, a part's ``data``: at most :data:`JSON_DEPTH_LIMIT`
levels, no key holding a lone surrogate). A task state in a filter reads an unknown name
as unspecified (:func:`parse_task_state_filter`); anywhere else it is strict.
"""

from __future__ import annotations

import base64
import binascii
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from gateway.protocol import A2A_VERSION, JSONRPC_BINDING, TaskState

#: The proto's enum numbers, which ProtoJSON also accepts on input.
TASK_STATE_NUMBERS: dict[int, TaskState] = dict(enumerate(TaskState))


class Role(StrEnum):
    UNSPECIFIED = "ROLE_UNSPECIFIED"
    USER = "ROLE_USER"
    AGENT = "ROLE_AGENT"


ROLE_NUMBERS: dict[int, Role] = dict(enumerate(Role))

#: The longest identifier a caller may choose (a message, context, task or tenant id, a
#: page token). The door's own ids are 32 characters and SDKs send UUIDs (36): 256 leaves
#: room for any prefixed or composite scheme, while every copy the door keeps and writes
#: (history, ``a2a_task_received`` trace records, ListTasks filters) stays small.
IDENTIFIER_LIMIT = 256
#: The deepest nesting of free-form JSON a caller may store on a task (``metadata``,
#: a part's ``data``). Anything stored is written back inside an answer several levels
#: deep; a bound far below the parser's own keeps every answer encodable.
JSON_DEPTH_LIMIT = 32

Identifier = Annotated[str, Field(max_length=IDENTIFIER_LIMIT)]


def _free_json_fault(value: Any, room: int) -> str | None:
    """What makes ``value`` no free-form JSON a door keeps, or None: more than ``room``
    levels of objects and arrays, or a key holding a lone UTF-16 surrogate (a
    ``"\\ud800"`` escape parses to one). It stops looking as soon as it knows.

    Why keys: pydantic writes a key of free-form JSON only as UTF-8, which has no form
    for a lone surrogate, so the message holding one could not be stored (a value holding
    one is written as any other string; docs/door.md, "Protocol")."""
    if isinstance(value, dict):
        for key in value:   # isascii is a flag test: an ASCII key costs no encode
            if type(key) is str and not key.isascii() and _lone_surrogate(key):
                return ("a key holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), "
                        "which UTF-8 cannot carry: pair it or leave it out")
        items: Any = value.values()
    elif isinstance(value, list):
        items = value
    else:
        return None
    if room == 0:
        return f"nests deeper than {JSON_DEPTH_LIMIT} levels of objects and arrays"
    for item in items:  # only containers nest: scalars cost no call
        if isinstance(item, dict | list):
            fault = _free_json_fault(item, room - 1)
            if fault is not None:
                return fault
    return None


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _keepable(value: Any) -> Any:
    fault = _free_json_fault(value, JSON_DEPTH_LIMIT)
    if fault is not None:
        raise ValueError(fault)
    return value


#: Free-form JSON a caller stores on a task, bounded in depth, every key UTF-8.
FreeJson = Annotated[Any, AfterValidator(_keepable)]


#: What @a2a-js/sdk sends for a status filter it was not given (protobuf-ts's name for
#: an unset enum): read as no filter. Every other unknown name is refused.
UNRECOGNIZED = "UNRECOGNIZED"


def parse_task_state_filter(value: object) -> TaskState | None:
    """A TaskState a caller filters on (None: no filter).

    An unknown name is refused, as the specification's own validation example does,
    but for ``"UNRECOGNIZED"``: @a2a-js/sdk sends it whenever no status is given, and it
    is read as no filter (docs/bindings.md)."""
    if value is None or value == UNRECOGNIZED:
        return None
    state = parse_task_state(value)
    return None if state is TaskState.UNSPECIFIED else state


def parse_task_state(value: object) -> TaskState:
    """A TaskState from its ProtoJSON name or number; ValueError names what is accepted."""
    if isinstance(value, bool):
        raise ValueError("expected a TASK_STATE_* name")
    if isinstance(value, int) and value in TASK_STATE_NUMBERS:
        return TASK_STATE_NUMBERS[value]
    if isinstance(value, str):
        try:
            return TaskState(value)
        except ValueError:
            pass
    names = ", ".join(state.value for state in TaskState)
    shown = repr(value)  # a caller's value, echoed in the error: bounded
    shown = shown if len(shown) <= 40 else shown[:40] + "..."
    raise ValueError(f"{shown} is not a task state; use one of {names}")


class WireModel(BaseModel):
    """Base of every wire type: camelCase aliases, Python names accepted too.

    ``defer_build``: a model's validator is built the first time it validates, not at
    import. A member's start validates only its agent card; the request and task models
    are built by the first call that needs them (measured: ~10 ms less CPU at each
    member's start). What is accepted and refused is unchanged.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True,
        defer_build=True,
    )

    def wire(self) -> dict[str, Any]:
        """The ProtoJSON dict of this model: camelCase, only the fields that were set."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


JsonObject = dict[str, Any]
#: A free-form JSON object a caller stores on a task (``metadata``), as FreeJson.
FreeObject = Annotated[dict[str, Any], AfterValidator(_keepable)]

# --- content -----------------------------------------------------------------------

#: The kinds of content a part carries, exactly one each.
PART_CONTENT = ("text", "raw", "url", "data")


class Part(WireModel):
    """One piece of content: exactly one of ``text``, ``raw`` (bytes), ``url``, ``data``.

    ``raw`` is carried as standard base64 text, as ProtoJSON writes ``bytes``; Python code
    may pass ``bytes`` and they are encoded.
    """

    text: str | None = None
    raw: str | None = None
    url: str | None = None
    data: FreeJson = None
    metadata: FreeObject | None = None
    filename: str | None = None
    media_type: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _exactly_one_content(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        present = [key for key in PART_CONTENT if key in value]
        if len(present) != 1:
            found = ", ".join(present) if present else "none"
            raise ValueError(
                f"a part carries exactly one of text, raw, url or data (found: {found})"
            )
        return value

    @field_validator("raw", mode="before")
    @classmethod
    def _raw_is_base64(cls, value: Any) -> Any:
        if isinstance(value, bytes | bytearray | memoryview):
            return base64.b64encode(bytes(value)).decode("ascii")
        if isinstance(value, str):
            try:
                base64.b64decode(value.replace("-", "+").replace("_", "/") + "===")
            except (binascii.Error, ValueError) as exc:
                raise ValueError("raw must be base64 text") from exc
        return value

    def raw_bytes(self) -> bytes | None:
        """The decoded ``raw`` content, or None for other kinds of part."""
        if self.raw is None:
            return None
        return base64.b64decode(self.raw.replace("-", "+").replace("_", "/") + "===")


def _role_value(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value in ROLE_NUMBERS:
        return ROLE_NUMBERS[value]
    return value


class Message(WireModel):
    message_id: Identifier = Field(min_length=1)
    context_id: Identifier | None = None
    task_id: Identifier | None = None
    role: Role
    parts: list[Part] = Field(min_length=1)
    metadata: FreeObject | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[Identifier] | None = None

    @field_validator("role", mode="before")
    @classmethod
    def _role(cls, value: Any) -> Any:
        return _role_value(value)

    @field_validator("role")
    @classmethod
    def _role_is_set(cls, value: Role) -> Role:
        if value is Role.UNSPECIFIED:
            raise ValueError("role must be ROLE_USER or ROLE_AGENT")
        return value


class Artifact(WireModel):
    artifact_id: str = Field(min_length=1)
    name: str | None = None
    description: str | None = None
    parts: list[Part] = Field(min_length=1)
    metadata: JsonObject | None = None
    extensions: list[str] | None = None


class TaskStatus(WireModel):
    state: TaskState
    message: Message | None = None
    timestamp: str | None = None


class Task(WireModel):
    id: str
    context_id: str | None = None
    status: TaskStatus
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: JsonObject | None = None


class TaskStatusUpdateEvent(WireModel):
    task_id: str
    context_id: str
    status: TaskStatus
    metadata: JsonObject | None = None


class TaskArtifactUpdateEvent(WireModel):
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: JsonObject | None = None


# --- requests ----------------------------------------------------------------------

class SendMessageConfiguration(WireModel):
    accepted_output_modes: list[str] | None = None
    task_push_notification_config: JsonObject | None = None
    history_length: int | None = Field(default=None, ge=0)
    return_immediately: StrictBool = False


class SendMessageRequest(WireModel):
    tenant: Identifier | None = None
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: FreeObject | None = None


class GetTaskRequest(WireModel):
    tenant: Identifier | None = None
    id: Identifier = Field(min_length=1)
    history_length: int | None = Field(default=None, ge=0)


class CancelTaskRequest(WireModel):
    tenant: Identifier | None = None
    id: Identifier = Field(min_length=1)
    metadata: FreeObject | None = None


class PushConfigRequest(WireModel):
    """GetTaskPushNotificationConfig and DeleteTaskPushNotificationConfig."""

    tenant: Identifier | None = None
    task_id: Identifier = Field(min_length=1)
    id: Identifier = Field(min_length=1)


class ListPushConfigsRequest(WireModel):
    tenant: Identifier | None = None
    task_id: Identifier = Field(min_length=1)
    page_size: int | None = Field(default=None, ge=0)
    page_token: Identifier | None = None


class PushAuthentication(WireModel):
    scheme: str = Field(min_length=1, max_length=64)
    credentials: str | None = Field(default=None, max_length=4096)


class TaskPushNotificationConfig(WireModel):
    """CreateTaskPushNotificationConfig's request (and a SendMessage's configuration)."""

    tenant: Identifier | None = None
    id: Identifier | None = None
    task_id: Identifier | None = None
    url: str = Field(min_length=1, max_length=2048)
    token: str | None = Field(default=None, max_length=4096)
    authentication: PushAuthentication | None = None


class SubscribeToTaskRequest(WireModel):
    tenant: Identifier | None = None
    id: Identifier = Field(min_length=1)


class GetExtendedAgentCardRequest(WireModel):
    tenant: Identifier | None = None


class ListTasksRequest(WireModel):
    tenant: Identifier | None = None
    context_id: Identifier | None = None
    status: TaskState | None = None
    page_size: int | None = Field(default=None, ge=1, le=100)
    page_token: Identifier | None = None
    history_length: int | None = Field(default=None, ge=0)
    status_timestamp_after: Identifier | None = None
    include_artifacts: StrictBool = False

    @field_validator("status", mode="before")
    @classmethod
    def _status(cls, value: Any) -> Any:
        return parse_task_state_filter(value)


# --- agent card --------------------------------------------------------------------


class AgentInterface(WireModel):
    url: str
    protocol_binding: str = JSONRPC_BINDING
    tenant: str | None = None
    protocol_version: str = A2A_VERSION


class AgentExtension(WireModel):
    uri: str
    description: str | None = None
    required: bool = False
    params: JsonObject | None = None


class AgentCapabilities(WireModel):
    streaming: bool | None = None
    push_notifications: bool | None = None
    extensions: list[AgentExtension] | None = None
    extended_agent_card: bool | None = None


class AgentSkill(WireModel):
    id: str
    name: str
    description: str
    tags: list[str]
    examples: list[str] | None = None
    input_modes: list[str] | None = None
    output_modes: list[str] | None = None


class HTTPAuthSecurityScheme(WireModel):
    description: str | None = None
    scheme: str
    bearer_format: str | None = None


class SecurityScheme(WireModel):
    http_auth_security_scheme: HTTPAuthSecurityScheme | None = None


class StringList(WireModel):
    values: list[str] = Field(alias="list")


class SecurityRequirement(WireModel):
    schemes: dict[str, StringList]


class AgentCard(WireModel):
    name: str
    description: str
    supported_interfaces: list[AgentInterface] = Field(min_length=1)
    version: str
    documentation_url: str | None = None
    capabilities: AgentCapabilities
    security_schemes: dict[str, SecurityScheme] | None = None
    security_requirements: list[SecurityRequirement] | None = None
    default_input_modes: list[str]
    default_output_modes: list[str]
    skills: list[AgentSkill]
