"""GET /metrics (docs/metrics.md), in-process: who may read it, in DoorAuth's order, and
that every series moves with what the door did."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.auth.credentials import DeclaredBearer, OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationVerifier
from gateway.door.app import DoorSettings, build_door
from gateway.door.card import CardInfo
from gateway.door.tasks import GateConfig, TaskRun
from gateway.metrics import DoorMetrics
from tests.support.auth import CI_TOKEN, FORMATION, KEY, bearer, mint

SCRAPER_TOKEN = "scraper-token-0123456789abcdef-012345"
A2A = {"A2A-Version": "1.0"}


async def _echo(run: TaskRun) -> str:
    return run.text


@pytest.fixture
def door() -> Any:
    operator = OperatorToken.generate()
    policy = AuthPolicy(
        authenticated=True, operator=operator, member="coder", accept_peer_tasks=True,
        verifier=FormationVerifier(KEY.public_bytes, FORMATION),
        bearers=(DeclaredBearer("ci", CI_TOKEN, frozenset({"SendMessage", "GetTask"})),
                 DeclaredBearer("scraper", SCRAPER_TOKEN, frozenset({"Metrics"}))))
    settings = DoorSettings(card=CardInfo(name="coder", description="d", version="1",
                                          member="coder", formation_id=FORMATION),
                            gate=GateConfig(concurrency=2))
    built = build_door(_echo, settings, policy=policy)
    built.operator_token = operator.value
    return built


def _client(door: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app),
                             base_url="http://127.0.0.1:8000")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


async def test_only_the_operator_and_a_credential_with_the_metrics_scope_may_read(
        door: Any) -> None:
    async with _client(door) as client:
        nobody = await client.get("/metrics")
        assert nobody.status_code == 401 and nobody.json()["error"] == "unauthenticated"
        forged = await client.get("/metrics", headers=bearer("mft1.forged"))
        assert forged.status_code == 401 and forged.json()["error"] == "invalid_token"
        peer = await client.get("/metrics", headers={**bearer(mint("planner", "coder")), **A2A})
        assert peer.status_code == 403 and peer.json()["error"] == "insufficient_scope"
        ci = await client.get("/metrics", headers={**bearer(CI_TOKEN), **A2A})
        assert ci.status_code == 403 and ci.json()["error"] == "insufficient_scope"
        for token in (door.operator_token, SCRAPER_TOKEN):
            answer = await client.get("/metrics", headers=bearer(token))
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert "murmur_door_requests_total" in answer.text
        posted = await client.post("/metrics", headers=bearer(door.operator_token))
        assert posted.status_code == 405


async def test_a_reading_of_a_peers_tokens_never_holds_one(door: Any) -> None:
    token = mint("planner", "coder")
    async with _client(door) as client:
        await client.post("/", headers={**bearer(token), **A2A}, json={
            "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}})
        text = (await client.get("/metrics", headers=bearer(door.operator_token))).text
    assert token not in text and "mft1" not in text and door.operator_token not in text


async def test_every_series_counts_what_the_door_did(door: Any) -> None:
    token = mint("planner", "coder")
    async with _client(door) as client:
        sent = await client.post("/", headers={**bearer(token), **A2A}, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}})
        task_id = sent.json()["result"]["task"]["id"]
        for _ in range(3):                       # the token is verified once, then cached
            got = await client.post("/", headers={**bearer(token), **A2A}, json={
                "jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}})
            assert got.status_code == 200
        await client.post("/", headers={**bearer("mft1.forged"), **A2A}, json={})
        await client.post("/", headers={**bearer(token), **A2A}, json={
            "jsonrpc": "2.0", "id": 3, "method": "x" * 40, "params": {}})
        await client.get("/tasks/" + task_id, headers={**bearer(token), **A2A})
        text = (await client.get("/metrics", headers=bearer(door.operator_token))).text
    samples = _samples(text)
    assert samples[("murmur_door_requests_total",
                    (("method", "SendMessage"), ("status", "200")))] == 1
    assert samples[("murmur_door_requests_total",
                    (("method", "GetTask"), ("status", "200")))] == 4   # JSON-RPC and REST
    assert samples[("murmur_door_requests_total", (("method", "none"), ("status", "401")))] == 1
    # A method name the door does not know is "other" (here refused: not in the scopes).
    assert samples[("murmur_door_requests_total", (("method", "other"), ("status", "403")))] == 1
    assert samples[("murmur_door_refusals_total", (("error", "invalid_token"),))] == 1
    verified = {result: samples[("murmur_door_token_verifications_total",
                                 (("result", result),))]
                for result in ("verified", "cached", "refused")}
    assert verified == {"verified": 2, "cached": 5, "refused": 1}  # + the operator's scrape
    assert samples[("murmur_door_tasks", (("state", "TASK_STATE_COMPLETED"),))] == 1
    assert samples[("murmur_door_request_duration_seconds_count",
                    (("method", "GetTask"),))] == 4
    assert samples[("murmur_door_request_duration_seconds_bucket",
                    (("le", "+Inf"), ("method", "GetTask")))] == 4


async def test_a_public_door_serves_no_metrics() -> None:
    settings = DoorSettings(card=CardInfo(name="coder", description="d", version="1"))
    public = build_door(_echo, settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=public.app),
                                 base_url="http://127.0.0.1:8000") as client:
        assert (await client.get("/metrics")).status_code == 404


def test_proxy_calls_render_by_callee_and_outcome() -> None:
    metrics = DoorMetrics()
    metrics.proxy_call("coder", "ok", 0.003)
    metrics.proxy_call("coder", "ok", 0.2)
    metrics.proxy_call("coder", "unreachable", None)
    samples = _samples(metrics.render().decode())
    assert samples[("murmur_proxy_calls_total", (("callee", "coder"), ("outcome", "ok")))] == 2
    assert samples[("murmur_proxy_calls_total",
                    (("callee", "coder"), ("outcome", "unreachable")))] == 1
    assert samples[("murmur_proxy_call_duration_seconds_bucket",
                    (("callee", "coder"), ("le", "0.005")))] == 1
    assert samples[("murmur_proxy_call_duration_seconds_sum", (("callee", "coder"),))] == \
        pytest.approx(0.203)


async def test_every_401_invalid_token_is_a_refused_verification(door: Any) -> None:
    async with _client(door) as client:
        await client.get("/metrics", headers={"Authorization": "Basic abc"})  # not Bearer
        await client.get("/metrics", headers=[("Authorization", f"Bearer {CI_TOKEN}"),
                                              ("Authorization", f"Bearer {CI_TOKEN}")])
        await client.get("/metrics", headers=bearer("not-a-token-anyone-accepts"))
        text = (await client.get("/metrics", headers=bearer(door.operator_token))).text
    samples = _samples(text)
    assert samples[("murmur_door_refusals_total", (("error", "invalid_token"),))] == 3
    assert samples[("murmur_door_token_verifications_total", (("result", "refused"),))] == 3
    assert samples[("murmur_door_requests_total", (("method", "none"), ("status", "401")))] == 3
