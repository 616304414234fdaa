"""The extended agent card (docs/door.md, "The extended agent card"): a card with
``extended_skills`` says ``capabilities.extendedAgentCard: true``; ``GetExtendedAgentCard``
(JSON-RPC) and ``GET /extendedAgentCard`` (HTTP+JSON) answer the operator and a declared
bearer whatever its scopes with the card plus those skills; a formation token is refused
``403 insufficient_scope`` (not one of its five scopes, the reference's table) while it
still reads the agent card; no credential is DoorAuth's 401; the public card never shows
them; a door without them, or a public door, answers ``-32004``."""

from __future__ import annotations

from typing import Any

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc

from gateway.auth.door_auth import AuthPolicy
from gateway.door.app import DoorSettings, build_door
from gateway.door.card import Skill
from gateway.door.tasks import TaskRun
from gateway.protocol import SESSION_EXTENSION_URI
from tests.support.bindings import Formation, clients, formation
from tests.support.door import A2A_HEADERS, BASE_URL, card_info, shimmed
from tests.support.grpc_clients import error_info

CARD = "/.well-known/agent-card.json"
EXTENDED = (Skill("audit", "Audit", "Audits a repository", ("security",)),
            Skill("deploy", "Deploy", "Ships a build"))
RPC_CALL = {"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}


async def echo(run: TaskRun) -> str:
    return run.text


def extended_door(*, public_card: bool = False) -> Formation:
    return formation(public_card=public_card, card=card_info(extended_skills=EXTENDED))


async def both_bindings(client: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
    rpc = await client.post("/", json=RPC_CALL, headers=A2A_HEADERS)
    rest = await client.get("/extendedAgentCard", headers=A2A_HEADERS)
    return rpc, rest


def skill_ids(card: dict[str, Any]) -> list[str]:
    return [skill["id"] for skill in card["skills"]]


@pytest.mark.parametrize("who", ["operator", "ci", "reader"])
async def test_the_operator_and_declared_credentials_read_the_extended_card_on_both_bindings(
        who: str) -> None:
    setup = extended_door()
    async with clients(setup, who) as (client,):
        card = (await client.get(CARD)).json()
        rpc, rest = await both_bindings(client)
    assert rpc.status_code == 200 and rest.status_code == 200, (rpc.text, rest.text)
    extended = rpc.json()["result"]
    assert rest.json() == extended, "the same card on both bindings"
    assert rest.headers["content-type"] == "application/a2a+json"
    assert card["capabilities"]["extendedAgentCard"] is True
    assert skill_ids(card) == ["code"], "the card itself lists no extended skill"
    assert skill_ids(extended) == ["code", "audit", "deploy"]
    assert extended["skills"][1] == {"id": "audit", "name": "Audit",
                                     "description": "Audits a repository",
                                     "tags": ["security"]}
    # The same card otherwise: interfaces, security, the session extension.
    assert {key: value for key, value in extended.items() if key != "skills"} == \
        {key: value for key, value in card.items() if key != "skills"}
    [extension] = extended["capabilities"]["extensions"]
    assert extension["uri"] == SESSION_EXTENSION_URI
    assert "signatures" not in extended


async def test_without_a_credential_it_is_doorauths_401_even_with_a_public_card() -> None:
    setup = extended_door(public_card=True)
    async with clients(setup, None) as (nobody,):
        public = await nobody.get(CARD)
        rpc, rest = await both_bindings(nobody)
        bad = await nobody.get("/extendedAgentCard",
                               headers={**A2A_HEADERS, "Authorization": "Bearer nope"})
    for response in (rpc, rest):
        assert response.status_code == 401
        assert response.json()["error"] == "unauthenticated"
    assert bad.status_code == 401 and bad.json()["error"] == "invalid_token"
    card = public.json()
    assert card["capabilities"]["extendedAgentCard"] is True, "the public card says so"
    assert skill_ids(card) == ["code"]
    assert "audit" not in public.text and "deploy" not in public.text


@pytest.mark.parametrize("accept_peer_tasks", [True, False])
@pytest.mark.parametrize("extended", [True, False])
async def test_a_formation_token_is_refused_the_extended_card_on_both_bindings(
        accept_peer_tasks: bool, extended: bool) -> None:
    # GetExtendedAgentCard is an A2A method and none of a formation token's five scopes:
    # refused before the door says whether it has an extended card, and before the peer
    # check (check 5 comes before check 6); the agent card stays its to read.
    setup = formation(accept_peer_tasks=accept_peer_tasks, public_card=True,
                      card=card_info(extended_skills=EXTENDED if extended else None))
    async with clients(setup, "planner", None) as (planner, nobody):
        rpc, rest = await both_bindings(planner)
        tenanted = await planner.get("/acme/extendedAgentCard", headers=A2A_HEADERS)
        card = await planner.get(CARD)
        public = await nobody.get(CARD)
    for response in (rpc, rest, tenanted):
        assert response.status_code == 403, response.text
        assert response.json() == {
            "error": "insufficient_scope",
            "message": "The credential member:planner may not call GetExtendedAgentCard."}
        assert response.headers["www-authenticate"] == (
            'Bearer realm="murmur", error="insufficient_scope"')
        assert "audit" not in response.text
    assert public.status_code == 200 and "audit" not in public.text
    if accept_peer_tasks:
        assert card.status_code == 200, card.text
        assert skill_ids(card.json()) == ["code"]
    else:
        assert card.json()["error"] == "peer_not_accepted"


async def test_a_formation_token_is_refused_the_extended_card_on_grpc() -> None:
    # The interceptor makes DoorAuth's one decision: PERMISSION_DENIED with the
    # ErrorInfo reason, before the request is read; the operator and a declared bearer
    # whatever its scopes read the card.
    setup = extended_door()
    grpc_url = await setup.door.serve_grpc()
    assert grpc_url is not None

    def metadata(who: str) -> list[tuple[str, str]]:
        return [("a2a-version", "1.0"), ("authorization", f"Bearer {setup.tokens[who]}")]

    try:
        async with grpc.aio.insecure_channel(grpc_url) as channel:
            service = a2a_pb2_grpc.A2AServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await service.GetExtendedAgentCard(a2a_pb2.GetExtendedAgentCardRequest(),
                                                   metadata=metadata("planner"))
            cards = [await service.GetExtendedAgentCard(
                a2a_pb2.GetExtendedAgentCardRequest(), metadata=metadata(who))
                for who in ("operator", "reader")]
    finally:
        await setup.door.stop_grpc(0.5)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    info = error_info(refused.value)
    assert info.reason == "INSUFFICIENT_SCOPE"
    assert dict(info.metadata) == {"credential": "member:planner",
                                   "method": "GetExtendedAgentCard"}
    assert "audit" not in (refused.value.details() or "")
    for card in cards:
        assert [skill.id for skill in card.skills] == ["code", "audit", "deploy"]


async def test_a_door_without_extended_skills_answers_unsupported_operation() -> None:
    # A2A 1.0.1 section 3.3.4: extendedAgentCard false is UnsupportedOperationError;
    # ExtendedAgentCardNotConfiguredError is for a card that declares one it lacks,
    # which a door never does.
    setup = formation()
    async with clients(setup, "operator", "reader") as (operator, reader):
        card = (await operator.get(CARD)).json()
        answers = [await both_bindings(client) for client in (operator, reader)]
    assert card["capabilities"]["extendedAgentCard"] is False
    for rpc, rest in answers:
        error = rpc.json()["error"]
        assert error["code"] == -32004
        assert error["data"][0]["reason"] == "UNSUPPORTED_OPERATION"
        assert "capabilities.extendedAgentCard is false" in error["message"]
        assert rest.status_code == 400
        assert rest.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"


async def test_a_public_door_has_no_extended_card_to_give() -> None:
    door = build_door(echo, DoorSettings(card=card_info(extended_skills=EXTENDED)),
                      policy=AuthPolicy())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=door.app),
                                 base_url=BASE_URL) as client:
        card = (await client.get(CARD)).json()
        rpc, rest = await both_bindings(client)
    assert card["capabilities"]["extendedAgentCard"] is False, "it authenticates nobody"
    assert "audit" not in str(card)
    assert rpc.json()["error"]["code"] == -32004 and rest.status_code == 400


async def test_a_bad_tenant_is_invalid_params_and_a_tenant_changes_nothing() -> None:
    setup = extended_door()
    async with clients(setup, "operator") as (operator,):
        bad = await operator.post("/", json={**RPC_CALL, "params": {"tenant": 5}},
                                  headers=A2A_HEADERS)
        tenanted = await operator.get("/acme/extendedAgentCard", headers=A2A_HEADERS)
    assert bad.json()["error"]["code"] == -32602
    assert skill_ids(tenanted.json()) == ["code", "audit", "deploy"]


async def test_the_extended_card_names_the_address_the_caller_reached() -> None:
    door = build_door(echo, DoorSettings(card=card_info(extended_skills=EXTENDED)),
                      policy=AuthPolicy(authenticated=True))
    door.add_listener(8000, "http://door.example:8000")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=shimmed(door)),
                                 base_url="http://door.example:8000") as client:
        card = (await client.get(CARD)).json()
        extended = (await client.post("/", json=RPC_CALL, headers=A2A_HEADERS)).json()["result"]
    urls = {interface["url"] for interface in extended["supportedInterfaces"]}
    assert urls == {"http://door.example:8000"}
    assert card["supportedInterfaces"] == extended["supportedInterfaces"]
    assert skill_ids(extended) == ["code", "audit", "deploy"]
