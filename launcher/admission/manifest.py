"""A capsule's ``murmur.yaml``: the manifest model, read with :mod:`launcher.admission.yaml_files`.

The manifest schema as pydantic models that refuse any key they do not list
(``E-MAN-001``, naming the key's dotted path) and a door requiring authentication beside
a non-empty ``capabilities.spawn.allow`` (``E-MAN-003``).

In order: the models from ``Skill`` to ``Manifest`` (their field rules and base are in
``manifest_fields.py``, a gateway member's ``agent.a2a`` in ``a2a_agent.py``), then reading
(schema faults said in words by ``schema_faults.py``) and the files a manifest names.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from launcher.admission.a2a_agent import A2aAgent, UpstreamHeaderError
from launcher.admission.manifest_fields import (
    TASK_SCOPES,
    AbsolutePath,
    Algorithm,
    Duration,
    EnvName,
    Host,
    ManifestVersion,
    MediaType,
    Name,
    NonBlank,
    PythonEntry,
    RelativeFile,
    Requirement,
    Scope,
    Strict,
    Version,
    WebOrigin,
    name_problem,
    refuse,
    refuse_below,
    version_problem,
)
from launcher.admission.model_agent import Inference, ModelAgent, model_problems
from launcher.admission.schema_faults import schema_fault
from launcher.admission.yaml_files import (
    YamlFault,
    describe_value,
    dotted,
    read_text_file,
    read_yaml,
)
from launcher.diagnostics import DiagnosticError

# --- The manifest ------------------------------------------------------------------------

class Skill(Strict):
    id: NonBlank
    name: NonBlank
    description: str = ""
    tags: list[str] = Field(default_factory=list)


class Agent(Strict):
    python: PythonEntry | None = Field(
        default=None, description="`module:callable`, an `async def run(task)` inside the capsule")
    command: list[NonBlank] | None = Field(
        default=None, min_length=1, description="a process harness, such as `[python3, run.py]`")
    a2a: A2aAgent | None = Field(
        default=None, description="an A2A server behind the door: `command: [...]` or `url: ...`")
    model: ModelAgent | None = Field(
        default=None, description="a model driven by the runtime (`inference.transport: "
        "http`): `{instructions: FILE, tools: [...]}` (docs/llm.md)")
    skills: list[Skill] = Field(default_factory=list)
    extended_skills: list[Skill] | None = Field(
        default=None, description="skills shown only to authenticated callers, through "
        "`GetExtendedAgentCard` (docs/door.md)")
    input_modes: list[MediaType] = Field(
        default_factory=lambda: ["text/plain"], min_length=1,
        description="the media types of the parts the agent takes (the card's "
        "`defaultInputModes`); beside `a2a`, in place of the upstream card's (for a card "
        "that misstates them, docs/gateway.md)")
    requires: list[Requirement] = Field(
        default_factory=list, description="Python distributions the agent needs, as pip "
        "requirement strings such as `httpx>=0.27`")

    @model_validator(mode="after")
    def _one_kind(self) -> Agent:
        if [self.python, self.command, self.a2a, self.model].count(None) != 3:
            raise refuse("must have exactly one of `python`, `command`, `a2a` and `model`",
                         "write `python: module:run` for a Python agent, `command: "
                         "[program, args...]` for a process harness, `a2a: {command: "
                         "[...]}` or `a2a: {url: ...}` for an A2A server behind the door, "
                         "or `model: {}` for a model member (docs/llm.md)")
        if self.a2a is not None and self.skills:
            raise refuse_below("skills", "cannot be given beside `agent.a2a`: the door's "
                               "card shows the upstream's own skills",
                               "remove `agent.skills`; the upstream's card lists its skills")
        ids = [skill.id for skill in self.skills]
        if len(ids) != len(set(ids)):
            raise refuse("gives two skills the same `id`", "give each skill its own `id`")
        self._check_extended_skills(ids)
        return self

    def _check_extended_skills(self, ids: list[str]) -> None:
        """Extended skills: at least one, each with an id of its own (the extended card
        lists them after ``skills``)."""
        if self.extended_skills is None:
            return
        if not self.extended_skills:
            raise refuse_below("extended_skills", "is an empty list",
                               "list the skills only authenticated callers see, or remove "
                               "`agent.extended_skills` for a door with no extended card")
        extended = [skill.id for skill in self.extended_skills]
        for skill_id in extended:
            if skill_id in ids or extended.count(skill_id) > 1:
                raise refuse_below("extended_skills", f"gives the skill id `{skill_id}` "
                                   "twice (the extended card lists `skills` and "
                                   "`extended_skills` together)",
                                   "give each skill, extended or not, its own `id`")

    @property
    def module(self) -> str | None:
        """The module of a ``python`` agent (``coder_agent`` for ``coder_agent:run``)."""
        return None if self.python is None else self.python.split(":", 1)[0]

    @property
    def function(self) -> str | None:
        """The callable of a ``python`` agent (``run`` for ``coder_agent:run``)."""
        return None if self.python is None else self.python.split(":", 1)[1]

    @property
    def kind(self) -> Literal["python", "command", "a2a", "model"]:
        """Which of the four kinds the agent is."""
        if self.python is not None:
            return "python"
        if self.model is not None:
            return "model"
        return "command" if self.command is not None else "a2a"

    def programs(self) -> tuple[str, ...]:
        """The programs the agent process starts (``argv[0]`` of ``command`` and of a
        model's tools), whose environments its sandbox grants (docs/isolation.md); a
        gateway upstream's is the runtime's to find."""
        found = [self.command[0]] if self.command else []
        for tool in self.model.tools if self.model is not None else ():
            found.append(tool.mcp[0] if tool.mcp else tool.command.argv[0]
                         if tool.command is not None else "")
        return tuple(program for program in found if program)

    @property
    def declares_input_modes(self) -> bool:
        """Whether ``input_modes`` was written (beside ``a2a``: it replaces the card's)."""
        return "input_modes" in self.model_fields_set

    @property
    def runs_turns(self) -> bool:
        """Whether the runtime runs the agent's turns in its agent process (``python``
        and ``model``): the task API, the turn rule, call-member and delegation."""
        return self.python is not None or self.model is not None


class PeerTasks(Strict):
    accept: bool = Field(default=False, description="`true` to serve tasks from other members")


class Exports(Strict):
    peer_tasks: PeerTasks = Field(default_factory=PeerTasks)


def _all_scopes() -> list[Scope]:
    return list(TASK_SCOPES)


class BearerCredential(Strict):
    name: Name
    env: EnvName = Field(description="the environment variable holding the token")
    scopes: list[Scope] = Field(default_factory=_all_scopes, min_length=1)


class JwtIssuer(Strict):
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
            raise refuse("must have exactly one of `jwks_file` and `pem_file`",
                         "name the issuer's public keys in one file inside the capsule")
        return self


def _unique_names(items: list[BearerCredential] | list[JwtIssuer], kind: str) -> None:
    names = [item.name for item in items]
    for name in names:
        if names.count(name) > 1:
            raise refuse(f"names two {kind} credentials `{name}`",
                         "give each credential its own name")


class Authentication(Strict):
    bearer: list[BearerCredential] = Field(default_factory=list)
    jwt: list[JwtIssuer] = Field(default_factory=list)

    @model_validator(mode="after")
    def _distinct(self) -> Authentication:
        _unique_names(self.bearer, "bearer")
        _unique_names(self.jwt, "jwt")
        return self


class Cors(Strict):
    allow_origins: list[WebOrigin] = Field(
        default_factory=list, description="web origins whose pages may call the door")


class PushGrant(Strict):
    allow: list[Host] = Field(
        default_factory=list, description="where the door may send push notifications: "
        "`host` or `host:port` entries, as `capabilities.network.allow`")


class Network(Strict):
    authentication: Authentication | None = Field(
        default=None, description="absent for a public door; `{}` for a door that accepts only the "
        "operator token and formation tokens")
    cors: Cors = Field(default_factory=Cors)
    public_card: bool = Field(
        default=False, description="serve the agent card, without the session extension, "
        "to callers with no credential")
    push: PushGrant = Field(default_factory=PushGrant,
                            description="push notifications (docs/push.md)")

    @classmethod
    def _refuse_empty(cls, data: Mapping[str, Any]) -> None:
        # Absent means a public door; an empty value is too easily meant as `{}`.
        if "authentication" in data and data["authentication"] is None:
            raise refuse("has `authentication:` written with no value",
                         "write `authentication: {}` for a door that accepts only the "
                         "operator and formation tokens, or remove the key for a public door")


class NetworkGrant(Strict):
    allow: list[Host] = Field(default_factory=list)


class SpawnGrant(Strict):
    allow: list[NonBlank] = Field(default_factory=list)
    max_children: int = Field(default=4, ge=1, le=64,
                              description="children of this member alive at once")
    max_depth: int = Field(default=3, ge=1, le=16,
                           description="how deep delegations below this member may go")


class EnvGrant(Strict):
    allow: list[EnvName] = Field(default_factory=list)


class FilesystemGrant(Strict):
    read: list[AbsolutePath] = Field(
        default_factory=list, description="folders and files the confined agent (and a "
        "gateway upstream) may also read and execute, never write: a model, a framework "
        "installed elsewhere (docs/isolation.md)")


class Capabilities(Strict):
    network: NetworkGrant = Field(default_factory=NetworkGrant)
    spawn: SpawnGrant = Field(default_factory=SpawnGrant)
    env: EnvGrant = Field(default_factory=EnvGrant)
    filesystem: FilesystemGrant = Field(default_factory=FilesystemGrant)


class RestartLimit(Strict):
    count: int = Field(default=3, ge=1, le=1000,
                       description="restarts at most this many times within `within`")
    within: Duration = 600


class Lifecycle(Strict):
    task_acceptance: Literal["single", "queue"] = "queue"
    after_task: Literal["exit", "sleep"] = "sleep"
    concurrency: int = Field(default=1, ge=1, le=1024, description="tasks run at once")
    queue_depth: int = Field(default=0, ge=0, le=100_000,
                             description="tasks held waiting beyond those running")
    idle_timeout: Duration | None = None
    #: In a formation: whether the launcher starts a peer that failed again
    #: (docs/restarts.md); a version 2 roster may set it per member.
    restart: Literal["never", "on-failure"] = "never"
    restart_limit: RestartLimit = Field(default_factory=RestartLimit)

    @property
    def holds(self) -> int:
        """Tasks the member holds at once: those running plus those queued."""
        return self.concurrency + self.queue_depth


class Retain(Strict):
    max_sessions: int | None = Field(default=None, ge=1)
    max_age: Duration | None = None


class Trace(Strict):
    retain: Retain = Field(default_factory=Retain)
    content: bool = Field(default=False, description="`true` to record a model member's "
                          "prompts and answers in its trace (docs/llm.md)")


class Manifest(Strict):
    """A capsule's ``murmur.yaml`` (docs/admission.md). Durations are in seconds."""

    manifest_version: ManifestVersion = Field(description="`1`")
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
    def _extended_card_needs_authentication(self) -> Manifest:
        # GetExtendedAgentCard must be authenticated (A2A 1.0 section 13.3), and a public
        # door authenticates nobody: its extended skills would be shown to no one.
        if self.agent.extended_skills is not None and self.network.authentication is None:
            raise PydanticCustomError("murmur_value", "{problem}", {
                "problem": "needs a door that authenticates its callers: only they may read "
                           "the extended card, and a door without `network.authentication` "
                           "authenticates nobody",
                "fix": "add `network: {authentication: {}}` (or declare credentials), or "
                       "move these skills to `agent.skills`",
                "below": ("agent", "extended_skills")})
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

    @model_validator(mode="after")
    def _model_settings(self) -> Manifest:
        for below, problem, fix in model_problems(
                self.agent.model, self.inference, env_allow=self.capabilities.env.allow,
                network_allow=self.capabilities.network.allow):
            raise PydanticCustomError("murmur_value", "{problem}",
                                      {"problem": problem, "fix": fix, "below": below})
        return self

    @model_validator(mode="after")
    def _push_on_own_tasks(self) -> Manifest:
        # A gateway member's tasks are its upstream's: it follows none it could push.
        if self.network.push.allow and self.agent.a2a is not None:
            raise PydanticCustomError("murmur_value", "{problem}", {
                "problem": "is set beside `agent.a2a`, whose tasks run in the upstream "
                           "server: a gateway member sends no push notifications",
                "fix": "remove network.push, or let the upstream send them itself",
                "below": ("network", "push", "allow")})
        return self

    @property
    def serves_peers(self) -> bool:
        return self.exports.peer_tasks.accept

    @property
    def authenticated(self) -> bool:
        return self.network.authentication is not None


# --- Reading -----------------------------------------------------------------------------

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
    model = manifest.agent.model
    if model is not None and model.instructions is not None:
        wanted.append(("agent.model.instructions", (str(PurePosixPath(model.instructions)),)))
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
           "Duration", "Inference", "JwtIssuer", "Lifecycle", "Manifest", "ModelAgent",
           "UpstreamHeaderError",
           "YamlFault", "check_files", "dotted", "load_manifest", "name_problem",
           "parse_manifest", "read_yaml", "referenced_files", "version_problem"]
