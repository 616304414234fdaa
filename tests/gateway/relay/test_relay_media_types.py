"""A gateway member takes the media types its upstream's card accepts
(``defaultInputModes``, docs/gateway.md): a part outside them is refused ``-32005`` at
the door, on both bindings, and never forwarded; a part inside them is. Its extended card
is its own door's (the upstream's extended card is never fetched)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from gateway.door.card import Skill
from tests.support.door import card_info, send_params
from tests.support.upstream import UPSTREAM_SKILL_ID, gateway_member

IMAGE = {"raw": "iVBORw0KGgo=", "mediaType": "image/png"}
DATA = {"data": {"k": 1}}


def with_part(part: dict[str, Any]) -> dict[str, Any]:
    params = send_params("look")
    params["message"]["parts"].append(part)
    return params


async def call(client: httpx.AsyncClient, method: str,
               params: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method,
                                            "params": params})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_part_the_upstream_does_not_accept_is_refused_before_it_is_forwarded() -> None:
    async with gateway_member() as formation, formation.client(formation.operator) as client:
        refused = [await call(client, method, with_part(part))
                   for method in ("SendMessage", "SendStreamingMessage")
                   for part in (IMAGE, DATA)]
        rest = await client.post("/message:send", content=json.dumps(with_part(IMAGE)),
                                 headers={"Content-Type": "application/json"})
        forwarded_before = formation.recorder.rpc()
        taken = await call(client, "SendMessage", send_params("hello"))
        forwarded = formation.recorder.rpc_methods()
    assert formation.door.card["defaultInputModes"] == ["text/plain"], "the upstream's"
    for answer in refused:
        assert answer["error"]["code"] == -32005, answer
        assert "this agent takes text/plain" in answer["error"]["message"]
    assert rest.status_code == 400
    assert rest.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    assert forwarded_before == [], "nothing refused reached the upstream"
    assert "result" in taken, taken
    assert forwarded == ["SendMessage"]


async def test_the_refusal_names_agent_input_modes_the_key_that_fixes_it() -> None:
    async with gateway_member() as formation, formation.client(formation.operator) as client:
        refused = await call(client, "SendMessage", with_part(IMAGE))
    message = refused["error"]["message"]
    assert refused["error"]["code"] == -32005, refused
    assert "this agent takes text/plain" in message
    assert "agent.input_modes in the member's murmur.yaml" in message, message


async def test_a_gateway_members_extended_card_is_its_own_doors() -> None:
    extended = (Skill("audit", "Audit", "Audits what the upstream wrote", ("security",)),)
    async with gateway_member(card=card_info(skills=(), extended_skills=extended)) as formation, \
            formation.client(formation.operator) as operator, \
            formation.client(formation.planner) as planner:
        card = (await operator.get("/.well-known/agent-card.json")).json()
        answers = [await call(operator, "GetExtendedAgentCard", {})]
        refused = await planner.post("/", json={"jsonrpc": "2.0", "id": 1, "method":
                                                "GetExtendedAgentCard", "params": {}})
        rest = await operator.get("/extendedAgentCard")
        asked_upstream = formation.recorder.rpc()
    # A formation token is refused it, as at any door: none of its five scopes.
    assert refused.status_code == 403 and refused.json()["error"] == "insufficient_scope"
    assert card["capabilities"]["extendedAgentCard"] is True
    assert [skill["id"] for skill in card["skills"]] == [UPSTREAM_SKILL_ID]
    for answer in answers:
        skills = answer["result"]["skills"]
        assert [skill["id"] for skill in skills] == [UPSTREAM_SKILL_ID, "audit"]
        assert skills[0] == card["skills"][0], "the upstream's skill as the card shows it"
        assert answer["result"]["name"] == card["name"]
    assert rest.status_code == 200 and rest.json() == answers[0]["result"]
    assert asked_upstream == [], "the upstream's own extended card is never fetched"
