"""The door and agent a member builds from its manifest: who the door lets in, the gate,
the card, ``task.env``, and the calls seam (trust, ``member_call`` records), in-process."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.auth.credentials import OPERATOR_CREDENTIAL, OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationKey, FormationVerifier
from gateway.caller import Caller
from gateway.door.app import DoorSettings, build_door
from gateway.door.card import CardInfo
from gateway.door.tasks import GateConfig, TaskRun
from gateway.proxy.call_member import CallFailed
from gateway.trace.bus import TraceBus
from gateway.trace.context import Span
from launcher.admission.manifest import parse_manifest
from launcher.diagnostics import DiagnosticError
from launcher.ids import new_formation_id
from launcher.member import door as member_door
from launcher.member.door import (
    CallsSeam,
    auth_policy,
    card_info,
    gate_config,
    idle_timeout,
    monotonic_deadline,
    task_env,
)
from launcher.member.options import MemberOptions
from launcher.member.place import FormationPlace
from launcher.spawn.channel import ChannelCredentials, DoorDirectory

FORMATION = new_formation_id()
KEY = FormationKey.generate()


def manifest(extra: str = "", *, authentication: str | None = "{}") -> Any:
    text = ("manifest_version: 1\nname: coder\nversion: 1.2.0\ndescription: Writes code.\n"
            "agent:\n  python: coder_agent:run\n  skills:\n"
            "    - {id: code, name: Code, description: Writes code, tags: [code]}\n")
    if authentication is not None:
        text += f"network:\n  authentication: {authentication}\n"
    return parse_manifest(text + extra)


def options(**changes: Any) -> MemberOptions:
    values: dict[str, Any] = {
        "capsule": "local/coder", "version": "1.2.0", "sha256": None, "project": Path("."),
        "task": None, "deadline": None, "task_acceptance": None, "after_task": None,
        "resume": None, "json": False}
    values.update(changes)
    return MemberOptions(**values)


def place(member: str = "coder", callees: tuple[str, ...] = (), *,
          entry: bool = False) -> FormationPlace:
    tokens = {c: KEY.mint(formation=FORMATION, caller=member, callee=c) for c in callees}
    credentials = ChannelCredentials(formation_id=FORMATION, member=member,
                                     key=KEY.public_bytes, tokens=tokens, entry=entry, fd=-1)
    return FormationPlace(formation_id=FORMATION, member=member, credentials=credentials,
                          entry=entry)


async def call(policy: AuthPolicy, token: str | None, method: str = "ListTasks") -> int:
    door = build_door(_echo, DoorSettings(card=CardInfo(name="c", description="d",
                                                        version="1")), policy=policy)
    headers = {"A2A-Version": "1.0", "Host": "127.0.0.1:80"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app),
                                 base_url="http://127.0.0.1") as client:
        response = await client.post("/", headers=headers, json={
            "jsonrpc": "2.0", "id": 1, "method": method, "params": {}})
    return response.status_code


async def _echo(run: TaskRun) -> str:
    return f"{run.caller.trust}:{run.text}"


# --------------------------------------------------------------------- auth


async def test_no_authentication_is_a_public_door(tmp_path: Path) -> None:
    policy = auth_policy(manifest(authentication=None), operator=OperatorToken.generate(),
                         place=place(), capsule_dir=tmp_path, environ={}, capsule="local/c")
    assert not policy.authenticated
    assert await call(policy, None) == 200


async def test_an_empty_authentication_takes_the_operator_and_formation_tokens(
        tmp_path: Path) -> None:
    operator = OperatorToken.generate()
    policy = auth_policy(manifest(extra="exports: {peer_tasks: {accept: true}}\n"),
                         operator=operator, place=place("coder"), capsule_dir=tmp_path,
                         environ={}, capsule="local/coder")
    assert policy.authenticated and policy.member == "coder" and policy.accept_peer_tasks
    assert await call(policy, None) == 401
    assert await call(policy, operator.value) == 200
    from_planner = KEY.mint(formation=FORMATION, caller="planner", callee="coder")
    assert await call(policy, from_planner) == 200
    to_reviewer = KEY.mint(formation=FORMATION, caller="planner", callee="reviewer")
    assert await call(policy, to_reviewer) == 403
    other = FormationKey.generate().mint(formation=FORMATION, caller="planner", callee="coder")
    assert await call(policy, other) == 401


async def test_a_door_in_no_formation_refuses_every_formation_token(tmp_path: Path) -> None:
    policy = auth_policy(manifest(), operator=OperatorToken.generate(),
                         place=FormationPlace(formation_id=FORMATION), capsule_dir=tmp_path,
                         environ={}, capsule="local/coder")
    assert policy.verifier is None
    token = KEY.mint(formation=FORMATION, caller="planner", callee="coder")
    assert await call(policy, token) == 401


async def test_declared_bearer_tokens_come_from_the_variables_the_manifest_names(
        tmp_path: Path) -> None:
    text = "{bearer: [{name: ci, env: CI_DOOR_TOKEN, scopes: [GetTask]}]}"
    policy = auth_policy(manifest(authentication=text), operator=OperatorToken.generate(),
                         place=FormationPlace(), capsule_dir=tmp_path,
                         environ={"CI_DOOR_TOKEN": "ci-token-0123456789abcdef"},
                         capsule="local/coder")
    assert await call(policy, "ci-token-0123456789abcdef", "GetTask") == 200
    assert await call(policy, "ci-token-0123456789abcdef", "ListTasks") == 403


def test_a_missing_bearer_variable_is_e_run_042_naming_it(tmp_path: Path) -> None:
    text = "{bearer: [{name: ci, env: CI_DOOR_TOKEN}]}"
    with pytest.raises(DiagnosticError) as caught:
        auth_policy(manifest(authentication=text), operator=OperatorToken.generate(),
                    place=FormationPlace(), capsule_dir=tmp_path, environ={},
                    capsule="local/coder")
    assert caught.value.code == "E-RUN-042"
    assert "CI_DOOR_TOKEN" in caught.value.diagnostic.message


def test_jwt_issuers_read_their_keys_from_the_capsule(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    public = Ed25519PrivateKey.generate().public_key()
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "corp.pem").write_bytes(
        public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    text = ("{jwt: [{name: corp, issuer: 'https://id.example', audience: coder, "
            "pem_file: keys/corp.pem, algorithms: [EdDSA]}]}")
    policy = auth_policy(manifest(authentication=text), operator=OperatorToken.generate(),
                         place=FormationPlace(), capsule_dir=tmp_path, environ={},
                         capsule="local/coder")
    assert [issuer.name for issuer in policy.jwt_issuers] == ["corp"]
    (tmp_path / "keys" / "corp.pem").write_text("not a key")
    with pytest.raises(DiagnosticError) as caught:
        auth_policy(manifest(authentication=text), operator=OperatorToken.generate(),
                    place=FormationPlace(), capsule_dir=tmp_path, environ={},
                    capsule="local/coder")
    assert caught.value.code == "E-RUN-042"


# --------------------------------------------------------------------- gate, card, env


def test_the_lifecycle_flags_override_the_manifest() -> None:
    text = ("lifecycle: {task_acceptance: queue, after_task: sleep, concurrency: 2, "
            "queue_depth: 3}\n")
    assert gate_config(manifest(text), options()) == GateConfig(
        concurrency=2, queue_depth=3, task_acceptance="queue", after_task="sleep")
    assert gate_config(manifest(text), options(task_acceptance="single",
                                               after_task="exit")) == GateConfig(
        concurrency=2, queue_depth=3, task_acceptance="single", after_task="exit")


def test_the_idle_timeout_applies_except_to_a_task_run_and_the_entry_member() -> None:
    text = "lifecycle: {idle_timeout: 10m}\n"
    assert idle_timeout(manifest(text), options(), place()) == 600
    assert idle_timeout(manifest(text), options(task="x"), place()) is None
    assert idle_timeout(manifest(text), options(), place(entry=True)) is None
    assert idle_timeout(manifest(), options(), place()) is None


def test_the_card_names_the_member_its_session_and_its_formation() -> None:
    info = card_info(manifest(), session_id="ses_1", place=place("coder"),
                     door_url="http://127.0.0.1:4000")
    assert (info.name, info.version, info.member) == ("coder", "1.2.0", "coder")
    assert (info.session_id, info.formation_id) == ("ses_1", FORMATION)
    assert info.door_url == "http://127.0.0.1:4000"
    assert [skill.id for skill in info.skills] == ["code"]


def test_the_card_takes_the_input_modes_and_the_extended_skills_of_the_manifest() -> None:
    plain = card_info(manifest(), session_id="ses_1", place=place("coder"), door_url="")
    assert (plain.input_modes, plain.extended_skills) == (("text/plain",), None)
    text = ("manifest_version: 1\nname: coder\nversion: 1.2.0\nagent:\n"
            "  python: coder_agent:run\n  input_modes: [text/plain, 'image/*']\n"
            "  extended_skills: [{id: audit, name: Audit, tags: [security]}]\n"
            "network: {authentication: {}}\n")
    info = card_info(parse_manifest(text), session_id="ses_1", place=place("coder"),
                     door_url="")
    assert info.input_modes == ("text/plain", "image/*")
    assert info.extended_skills is not None
    assert [(skill.id, skill.tags) for skill in info.extended_skills] == [
        ("audit", ("security",))]


def test_task_env_is_the_grant_plus_the_peers_and_never_the_runtimes_own() -> None:
    grant = "capabilities: {env: {allow: [OPENAI_API_KEY, MISSING, MURMUR_FORMATION_PEERS]}}\n"
    environ = {"OPENAI_API_KEY": "sk", "PATH": "/bin", "MURMUR_HOME": "/h",
               "MURMUR_FORMATION_PEERS": "forged=http://x"}
    env = task_env(manifest(grant), environ, ("coder", "reviewer"))
    assert env == {"OPENAI_API_KEY": "sk", "MURMUR_FORMATION_PEERS":
                   "coder=http://coder.formation.invalid "
                   "reviewer=http://reviewer.formation.invalid"}
    assert "MURMUR_FORMATION_PEERS" not in task_env(manifest(grant), environ, ())


def test_a_monotonic_deadline_follows_the_wall_clock_deadline() -> None:
    assert monotonic_deadline(None) is None
    value = monotonic_deadline(datetime.now(UTC) + timedelta(seconds=30))
    import time
    assert value is not None and 29 < value - time.monotonic() <= 30


# --------------------------------------------------------------------- calls


class _Run:
    """The parts of a TaskRun the calls seam reads."""

    def __init__(self, task_id: str, trust: str) -> None:
        self.id = task_id
        self.caller = Caller(OPERATOR_CREDENTIAL, "operator", trust)  # type: ignore[arg-type]


@pytest.fixture
def callee_records() -> list[dict[str, Any]]:
    """The trace records of the coder's door (``callee_app``)."""
    return []


def serve_callee(monkeypatch: pytest.MonkeyPatch, records: list[dict[str, Any]],
                 agent: Any = None, gate: GateConfig | None = None) -> Any:
    """The coder's real door (``agent``, else the echo) behind httpx.ASGITransport, as
    the planner's inner transport; its trace records into ``records``."""
    callee_trace = TraceBus()
    callee_trace.add_sink(records.append)
    settings = DoorSettings(card=CardInfo(name="coder", description="d", version="1",
                                          member="coder", formation_id=FORMATION),
                            gate=gate or GateConfig(concurrency=4))
    policy = AuthPolicy(authenticated=True, verifier=FormationVerifier(KEY.public_bytes,
                                                                       FORMATION),
                        member="coder", accept_peer_tasks=True)
    door = build_door(agent or _echo, settings, policy=policy, trace=callee_trace)
    monkeypatch.setattr(member_door, "_inner_transport",
                        lambda calls: httpx.ASGITransport(app=door.app))
    return door


@pytest.fixture
def callee_app(monkeypatch: pytest.MonkeyPatch, callee_records: list[dict[str, Any]]) -> Any:
    """The coder's real door behind httpx.ASGITransport, as the planner's inner transport."""
    return serve_callee(monkeypatch, callee_records)


async def test_a_call_carries_the_trust_of_the_task_and_is_traced_by_name_only(
        callee_app: Any) -> None:
    bus = TraceBus()
    records: list[dict[str, Any]] = []
    bus.add_sink(records.append)
    directory = DoorDirectory(callees=("coder",))
    directory.set({"coder": "http://127.0.0.1:4301"})
    seam = CallsSeam(manifest=manifest("capabilities: {network: {allow: [localhost]}}\n"),
                     place=place("planner", ("coder",)), directory=directory, trace=bus,
                     spans={}.get, deadline=None, capsule="local/planner")
    for task_id, trust in (("t-op", "trusted"), ("t-client", "untrusted")):
        calls = seam.calls_for(_Run(task_id, trust))  # type: ignore[arg-type]
        handle = await calls.call_member("coder", "hello")
        assert await handle == f"{trust}:hello"
        await calls.aclose()
    traced = [r for r in records if r["event"] == "member_call"]
    assert [(r["task_id"], r["callee"], r["url"]) for r in traced] == [
        ("t-op", "coder", "http://coder.formation.invalid"),
        ("t-client", "coder", "http://coder.formation.invalid")]
    assert "127.0.0.1:4301" not in json.dumps(records)
    assert "mft1." not in json.dumps(records)
    await seam.aclose()


async def test_task_http_to_a_member_is_traced_and_a_non_callee_is_refused(
        callee_app: Any) -> None:
    bus = TraceBus()
    records: list[dict[str, Any]] = []
    bus.add_sink(records.append)
    directory = DoorDirectory(callees=("coder",))
    directory.set({"coder": "http://127.0.0.1:4301"})
    seam = CallsSeam(manifest=manifest("capabilities: {network: {allow: [localhost]}}\n"),
                     place=place("planner", ("coder",)), directory=directory, trace=bus,
                     spans={}.get, deadline=None, capsule="local/planner")
    calls = seam.calls_for(_Run("t1", "trusted"))  # type: ignore[arg-type]
    response = await calls.http.post(
        "http://coder.formation.invalid/", headers={"A2A-Version": "1.0"},
        json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
    assert response.status_code == 200
    assert [(r["callee"], r.get("via"), r["task_id"]) for r in records
            if r["event"] == "member_call"] == [("coder", "http", "t1")]
    with pytest.raises(CallFailed) as caught:
        await calls.call_member("reviewer", "hi")
    assert caught.value.state == "refused"
    await calls.aclose()
    await seam.aclose()


async def test_a_member_in_no_formation_still_gets_task_http_through_its_grant() -> None:
    seam = CallsSeam(manifest=manifest(), place=FormationPlace(), directory=DoorDirectory(),
                     trace=TraceBus(), spans={}.get, deadline=None, capsule="local/coder")
    calls = seam.calls_for(_Run("t1", "trusted"))  # type: ignore[arg-type]
    assert calls.peers == ()
    with pytest.raises(httpx.TransportError, match="network.allow"):
        await calls.http.get("http://example.com/")
    await calls.aclose()
    await seam.aclose()


# --------------------------------------------------------------------- trace context


def _planner_seam(records: list[dict[str, Any]], spans: dict[str, Span],
                  allow: str = "localhost") -> CallsSeam:
    bus = TraceBus()
    bus.add_sink(records.append)
    directory = DoorDirectory(callees=("coder",))
    directory.set({"coder": "http://127.0.0.1:4301"})
    return CallsSeam(manifest=manifest(f"capabilities: {{network: {{allow: [{allow}]}}}}\n"),
                     place=place("planner", ("coder",)), directory=directory, trace=bus,
                     spans=spans.get, deadline=None, capsule="local/planner")


def _received(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] == "a2a_task_received"]


async def test_a_call_member_call_is_a_child_span_of_its_task_and_names_the_callee_task(
        callee_app: Any, callee_records: list[dict[str, Any]]) -> None:
    task = Span("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", None)
    records: list[dict[str, Any]] = []
    seam = _planner_seam(records, {"t1": task})
    calls = seam.calls_for(_Run("t1", "trusted"))  # type: ignore[arg-type]
    handle = await calls.call_member("coder", "hello")
    assert await handle == "trusted:hello"
    await calls.aclose()
    await seam.aclose()
    [call] = [r for r in records if r["event"] == "member_call"]
    [received] = _received(callee_records)
    assert call["trace_id"] == received["trace_id"] == task.trace_id
    assert call["parent_span_id"] == task.span_id
    assert received["parent_span_id"] == call["span_id"] != task.span_id
    assert received["span_id"] not in (call["span_id"], task.span_id)
    assert call["callee_task_id"] == received["task_id"] == handle.task_id


async def test_a_component_cannot_forge_the_trace_context_of_its_call(
        callee_app: Any, callee_records: list[dict[str, Any]]) -> None:
    # An agent that sends its own traceparent (to graft its call onto another trace, or
    # to hide it from its task's tree) has it replaced by the runtime's.
    task = Span("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", None)
    forged = "00-11111111111111111111111111111111-2222222222222222-01"
    records: list[dict[str, Any]] = []
    seam = _planner_seam(records, {"t1": task})
    calls = seam.calls_for(_Run("t1", "trusted"))  # type: ignore[arg-type]
    response = await calls.http.post(
        "http://coder.formation.invalid/",
        headers={"A2A-Version": "1.0", "traceparent": forged, "tracestate": "x=1"},
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}})
    assert response.status_code == 200, response.text
    await calls.aclose()
    await seam.aclose()
    [call] = [r for r in records if r["event"] == "member_call"]
    assert call["via"] == "http" and call["parent_span_id"] == task.span_id
    [received] = _received(callee_records)
    assert received["trace_id"] == task.trace_id != forged.split("-")[1]
    assert received["parent_span_id"] == call["span_id"]


async def test_a_call_answered_busy_first_names_the_callee_task_once_its_door_holds_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    release = asyncio.Event()

    async def slow(run: TaskRun) -> str:
        await release.wait()
        return "done"

    callee_records: list[dict[str, Any]] = []
    serve_callee(monkeypatch, callee_records, slow, GateConfig(concurrency=1,
                                                               retry_after_ms=10))
    records: list[dict[str, Any]] = []
    seam = _planner_seam(records, {})
    calls = seam.calls_for(_Run("t1", "trusted"))  # type: ignore[arg-type]
    first = await calls.call_member("coder", "one")
    second = await calls.call_member("coder", "two")     # the gate is full: busy
    assert second.state == "offering" and second.task_id is None
    assert [r.get("callee_task_id") for r in records if r["event"] == "member_call"] == [
        first.task_id]
    release.set()
    assert await first == await second == "done"
    calls_made = [r for r in records if r["event"] == "member_call"]
    assert [r["callee_task_id"] for r in calls_made] == [first.task_id, second.task_id]
    received = {r["task_id"]: r for r in callee_records if r["event"] == "a2a_task_received"}
    for call in calls_made:
        assert received[call["callee_task_id"]]["parent_span_id"] == call["span_id"]
    await calls.aclose()
    await seam.aclose()


async def test_a_failed_offer_is_recorded_with_its_outcome(callee_app: Any) -> None:
    records: list[dict[str, Any]] = []
    seam = _planner_seam(records, {}, allow="example.com")
    calls = seam.calls_for(_Run("t1", "trusted"))  # type: ignore[arg-type]
    with pytest.raises(CallFailed) as failed:
        await calls.call_member("coder", "hi")      # the grant does not reach loopback
    [call] = [r for r in records if r["event"] == "member_call"]
    assert call["outcome"] == failed.value.state and "callee_task_id" not in call
    assert "127.0.0.1" not in json.dumps(call)
    await calls.aclose()
    await seam.aclose()
