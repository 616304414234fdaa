"""A member's door and its agent, built from the capsule's ``murmur.yaml``.

* :func:`auth_policy`: ``network.authentication`` absent is a public door; present, the
  door takes the session's operator token, the declared bearer tokens (read from the
  environment variables the manifest names) and JWT issuers (key files inside the
  capsule), and, when the member was handed a formation channel, formation tokens
  issued for it (``FormationVerifier`` over the channel's key and formation id);
  ``network.public_card`` and ``network.cors.allow_origins`` pass to the policy as they
  are.
* :func:`gate_config`: ``lifecycle`` with the ``--lifecycle-*`` overrides.
* :func:`card_info`: what the agent card says (skills, extended skills, input modes).
* :func:`agent_environment`: what every task is told (``task.env`` is
  ``capabilities.env.allow`` plus ``MURMUR_FORMATION_PEERS``, never the runtime's own);
  :func:`process_environment`: the agent process's own environment.
* :class:`CallsSeam`: the formation proxy of this member and one ``MemberCalls`` per
  running task, writing a ``member_call`` trace record for each call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.auth.credentials import CredentialError, DeclaredBearer, JwtIssuer, OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationVerifier, b64url_encode
from gateway.door.card import CardInfo, Skill
from gateway.door.tasks import GateConfig, TaskRun
from gateway.metrics import DoorMetrics
from gateway.protocol import PEERS_ENV
from gateway.proxy.egress import AllowList, check_callees, peers_environ
from gateway.trace.bus import TraceBus
from gateway.trace.context import TaskSpans
from launcher.admission.manifest import Manifest
from launcher.diagnostics import DiagnosticError
from launcher.member.capsule import AgentEnvironment
from launcher.member.options import MemberOptions
from launcher.member.outcome import CAPSULE_NOT_RUNNABLE, DOOR_CREDENTIALS, member_diagnostic
from launcher.member.place import FormationPlace
from launcher.spawn.channel import DoorDirectory

if TYPE_CHECKING:       # httpx and the proxy are imported when a task first calls out
    import httpx

    from gateway.proxy.formation import FormationTransport
    from gateway.proxy.inference import InferenceEgress
    from launcher.member.calls import TracedCalls
    from launcher.member.delegation.delegator import Delegator
    from launcher.member.delegation.task_children import TaskChildren

# --------------------------------------------------------------------------- the door


def auth_policy(manifest: Manifest, *, operator: OperatorToken, place: FormationPlace,
                capsule_dir: Path, environ: Mapping[str, str], capsule: str) -> AuthPolicy:
    """What the door accepts (a delegated child's: the operator token at least). Raises
    ``DiagnosticError`` (``E-RUN-042``) when a declared credential cannot be set up; the
    text names the variable or file, never a token."""
    network = manifest.network
    authentication = network.authentication
    origins = tuple(network.cors.allow_origins)
    if authentication is None and place.delegated:
        # A delegated child's door takes its parent's runtime, with the operator token,
        # and nobody else: a public door would take a task from anyone on the host, and a
        # formation token must be refused with 401 (docs/delegation.md).
        return AuthPolicy(authenticated=True, operator=operator, allow_origins=origins)
    if authentication is None:
        return AuthPolicy(allow_origins=origins)
    try:
        bearers = tuple(
            DeclaredBearer.from_env(bearer.name, bearer.env, bearer.scopes, environ)
            for bearer in authentication.bearer)
        issuers = tuple(_issuer(issuer, capsule_dir) for issuer in authentication.jwt)
    except CredentialError as exc:
        raise DiagnosticError(member_diagnostic(
            DOOR_CREDENTIALS, "network.authentication", capsule=capsule,
            version=manifest.version, problem=str(exc))) from None
    verifier = None
    key = place.key
    if key is not None and place.formation_id is not None:
        verifier = FormationVerifier(key, place.formation_id)
    bounds = place.credentials.bounds if place.credentials is not None else None
    return AuthPolicy(
        authenticated=True, operator=operator, bearers=bearers, jwt_issuers=issuers,
        verifier=verifier, member=place.member if verifier is not None else None,
        accept_peer_tasks=manifest.serves_peers, public_card=network.public_card,
        allow_origins=origins, bounds=bounds.door if bounds is not None else None)


def _issuer(issuer: Any, capsule_dir: Path) -> JwtIssuer:
    if issuer.jwks_file is not None:
        return JwtIssuer.from_jwks_file(issuer.name, issuer.issuer, issuer.audience,
                                        issuer.algorithms, capsule_dir / issuer.jwks_file,
                                        issuer.scopes)
    return JwtIssuer.from_pem_file(issuer.name, issuer.issuer, issuer.audience,
                                   issuer.algorithms, capsule_dir / issuer.pem_file,
                                   issuer.scopes)


def gate_config(manifest: Manifest, options: MemberOptions) -> GateConfig:
    """``lifecycle`` with ``--lifecycle-task-acceptance`` / ``--lifecycle-after-task``."""
    lifecycle = manifest.lifecycle
    return GateConfig(
        concurrency=lifecycle.concurrency,
        queue_depth=lifecycle.queue_depth,
        task_acceptance=options.task_acceptance or lifecycle.task_acceptance,
        after_task=options.after_task or lifecycle.after_task,
    )


def idle_timeout(manifest: Manifest, options: MemberOptions,
                 place: FormationPlace) -> int | None:
    """``lifecycle.idle_timeout`` in seconds, or None. A ``--task`` session ends with its
    task, and the entry member of a formation launched without ``--task`` runs with no
    idle timeout (docs/member-runtime.md, "Flags")."""
    if options.task is not None or place.entry:
        return None
    return manifest.lifecycle.idle_timeout


def card_info(manifest: Manifest, *, session_id: str, place: FormationPlace,
              door_url: str, own_key: bytes | None = None) -> CardInfo:
    """What the card says: ``agent.skills``, ``agent.extended_skills`` (the extended
    card's, docs/door.md) and ``agent.input_modes`` (its ``defaultInputModes``, which the
    door enforces; a gateway member's card takes its upstream's); its signing key is the
    formation's, else ``own_key`` (a standalone door's ``--card-signing-key``)."""
    agent = manifest.agent
    extended = agent.extended_skills
    key = place.key if place.key is not None else own_key
    return CardInfo(name=manifest.name, description=manifest.description or manifest.name,
                    version=manifest.version, skills=_skills(agent.skills),
                    member=place.member, session_id=session_id,
                    formation_id=place.formation_id, door_url=door_url,
                    input_modes=tuple(agent.input_modes),
                    extended_skills=_skills(extended) if extended is not None else None,
                    signing_key=b64url_encode(key) if key is not None else None)


def _skills(skills: Iterable[Any]) -> tuple[Skill, ...]:
    return tuple(Skill(id=skill.id, name=skill.name, description=skill.description,
                       tags=tuple(skill.tags)) for skill in skills)


# --------------------------------------------------------------------------- the agent


def task_env(manifest: Manifest, environ: Mapping[str, str],
             callees: Iterable[str]) -> dict[str, str]:
    """``task.env``: each variable ``capabilities.env.allow`` names that is set, then
    ``MURMUR_FORMATION_PEERS`` (absent when the member may call nobody), which the
    grant can neither supply nor replace."""
    # A model member's endpoint key stays with the runtime, which attaches it at egress
    # (docs/llm.md, "The key"): the agent process and its tools never hold it.
    withheld = {PEERS_ENV}
    if manifest.agent.model is not None and manifest.inference.api_key_env is not None:
        withheld.add(manifest.inference.api_key_env)
    env = {name: environ[name] for name in manifest.capabilities.env.allow
           if name in environ and name not in withheld}
    env.update(peers_environ(tuple(callees)))
    return env


#: What an agent process's own environment keeps of the runtime's: where programs are
#: and how text is encoded (no secret lives there; everything else may).
_PROCESS_BASICS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


def process_environment(environ: Mapping[str, str], env: Mapping[str, str], *,
                        home: Path, tmp: Path) -> dict[str, str]:
    """The agent process's ``os.environ``: the basics of ``environ``, ``task.env``, and
    ``HOME``/``TMPDIR`` in the session (the forward proxy's variables are added by the
    caller). Never the runtime's own environment, which may hold a declared credential."""
    basics = {name: environ[name] for name in _PROCESS_BASICS if name in environ}
    return {**basics, **env, "HOME": str(home), "TMPDIR": str(tmp)}


def agent_environment(manifest: Manifest, *, place: FormationPlace, env: Mapping[str, str],
                      deadline: datetime | None, workdir: Path, home: Path,
                      tmp: Path, instructions: str = "") -> AgentEnvironment:
    return AgentEnvironment(member=place.member, formation_id=place.formation_id,
                            deadline=deadline, workdir=workdir, home=home, tmp=tmp,
                            env=dict(env), max_turns=manifest.inference.max_turns,
                            instructions=instructions)


def monotonic_deadline(deadline: datetime | None) -> float | None:
    """``deadline`` on ``time.monotonic``'s clock (what ``MemberCalls`` counts with)."""
    if deadline is None:
        return None
    return time.monotonic() + (deadline - datetime.now(UTC)).total_seconds()


# --------------------------------------------------------------------------- calls


class CallsSeam:
    """This member's formation proxy (one pool) and the calls object of each task.

    ``place`` gives the callees and their tokens; ``directory`` the callees' door URLs
    as the channel delivers them. A member in no formation still gets ``task.http``
    through the proxy, so its requests pass ``capabilities.network.allow``. The grant
    and the callees are checked here, at start; the proxy itself (and httpx with it,
    see ``launcher.member.calls``) is built when a task first asks for its calls.
    """

    def __init__(self, *, manifest: Manifest, place: FormationPlace,
                 directory: DoorDirectory, trace: TraceBus, spans: TaskSpans,
                 deadline: datetime | None, capsule: str,
                 metrics: DoorMetrics | None = None,
                 delegator: Delegator | None = None,
                 call_depth: Callable[[str | None], int] | None = None,
                 inference: Callable[[], InferenceEgress] | None = None) -> None:
        self._trace = trace
        #: Makes a model member's endpoint as its egress (its key, its counts) with the
        #: proxy (httpx is imported then); None for every other member.
        self._inference = inference
        bounds = place.credentials.bounds if place.credentials is not None else None
        #: A version 2 roster's bounds on the way out: the member's limits.calls, the
        #: depth its calls carry (docs/bounds.md); None for a version 1 roster.
        self._bounds = None if bounds is None else (bounds.calls, call_depth)
        #: The session's children, when ``capabilities.spawn.allow`` names a capsule.
        self.delegator = delegator
        self._spans = spans
        self._metrics = metrics
        self._deadline = deadline
        self._tokens = place.tokens
        self._directory = directory
        self._allow = tuple(manifest.capabilities.network.allow)
        self._transport: FormationTransport | None = None
        self._made: list[TracedCalls] = []
        self.peers = place.callees
        try:
            check_callees(self._tokens)           # as the proxy will, in its order
            AllowList(self._allow)
        except ValueError as exc:
            raise DiagnosticError(member_diagnostic(
                CAPSULE_NOT_RUNNABLE, "capabilities.network.allow", capsule=capsule,
                version=manifest.version, problem=str(exc))) from None

    @property
    def transport(self) -> FormationTransport:
        """The formation proxy, built on first use (its pool on its first request)."""
        if self._transport is None:
            from launcher.member.calls import formation_transport

            calls_members = bool(self.peers)
            self._transport = formation_transport(
                tokens=self._tokens, doors=self._directory, allow=self._allow,
                trace=self._trace, spans=self._spans, metrics=self._metrics,
                make_inner=lambda: _inner_transport(calls_members), bounds=self._bounds,
                inference=None if self._inference is None else self._inference())
            # A restarted callee's new door arrives as a later channel line: the proxy
            # reads it at its next request (docs/restarts.md).
            on_doors = getattr(self._directory, "on_doors", None)
            if on_doors is not None:
                on_doors(self._transport.doors_moved)
        return self._transport

    def calls_for(self, run: TaskRun) -> TracedCalls | TaskChildren:
        """The calls object of one running task; its trust is the task's own. A member
        that may delegate gets its calls and children together."""
        if self.delegator is None:
            return self._traced_calls(run)
        from launcher.member.delegation.task_children import TaskChildren

        return TaskChildren(run, self.delegator,
                            self._traced_calls(run) if self.peers else None)

    def _traced_calls(self, run: TaskRun) -> TracedCalls:
        from launcher.member.calls import task_calls

        calls = task_calls(self.transport, trace=self._trace, task_id=run.id,
                           span=self._spans(run.id), peers=self.peers, trust=run.caller.trust,
                           deadline=monotonic_deadline(self._deadline))
        # Kept until closed: a call its callee took while the task ran outlives the task.
        self._made = [made for made in self._made if not made.closed]
        self._made.append(calls)
        return calls

    async def end_calls(self) -> None:
        """The session ends: every call that outlived its task stops here, and every
        child winds down, before ``session_end`` (no record of theirs comes after it)."""
        for calls in self._made:
            await calls.end()
        self._made.clear()
        if self.delegator is not None:
            await self.delegator.end()

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()


def _inner_transport(calls_members: bool) -> httpx.AsyncBaseTransport:
    """aiohttp's pool for a member that calls others (measured faster, docs/proxy.md);
    httpx's own for ``task.http`` alone, which keeps aiohttp's import off a member that
    never calls anyone. Made on the proxy's first request."""
    if calls_members:
        from gateway.proxy.aiohttp_transport import default_inner_transport

        return default_inner_transport()
    import httpx

    return httpx.AsyncHTTPTransport()
