"""A gateway member's agent card (docs/gateway.md): the upstream's name, description,
version, skills, provider and streaming, with the door's supportedInterfaces, security
schemes and session extension, push notifications off, and no signature of the
upstream's. Read through the door in-process."""

from __future__ import annotations

from typing import Any

from gateway.protocol import SESSION_EXTENSION_URI
from tests.support.door import BASE_URL
from tests.support.upstream import (
    UPSTREAM_DESCRIPTION,
    UPSTREAM_NAME,
    UPSTREAM_PROVIDER,
    UPSTREAM_SKILL_ID,
    UPSTREAM_VERSION,
    gateway_member,
    upstream_card,
)

DOOR_URL = BASE_URL + "/"


async def served_card() -> tuple[dict[str, Any], dict[str, Any]]:
    """The card the door serves (read by the operator), and the upstream's own."""
    async with gateway_member() as formation, \
            formation.client(formation.operator) as operator:
        formation.door.set_url(DOOR_URL)
        response = await operator.get("/.well-known/agent-card.json")
        assert response.status_code == 200, response.text
        upstream, _ = await upstream_card(formation.upstream_url)
    card: dict[str, Any] = response.json()
    return card, upstream


async def test_the_card_describes_the_upstream_agent() -> None:
    card, upstream = await served_card()
    assert (card["name"], card["description"], card["version"]) == \
        (UPSTREAM_NAME, UPSTREAM_DESCRIPTION, UPSTREAM_VERSION)
    assert card["provider"] == UPSTREAM_PROVIDER
    assert [skill["id"] for skill in card["skills"]] == [UPSTREAM_SKILL_ID]
    assert card["skills"] == upstream["skills"]
    assert card["capabilities"]["streaming"] is True


async def test_the_card_is_reached_at_the_door_with_the_doors_security() -> None:
    card, upstream = await served_card()
    assert card["supportedInterfaces"] == [
        {"url": DOOR_URL, "protocolBinding": binding, "protocolVersion": "1.0"}
        for binding in ("JSONRPC", "HTTP+JSON")]
    assert upstream["supportedInterfaces"][0]["url"] != DOOR_URL
    assert "bearer" in card["securitySchemes"]
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
    extensions = card["capabilities"]["extensions"]
    assert [extension["uri"] for extension in extensions] == [SESSION_EXTENSION_URI]
    assert extensions[0]["params"] == {"member": "coder", "sessionId": "ses_0123",
                                       "formationId": "frm_0456"}


async def test_attack_the_card_turns_push_off_and_drops_the_upstreams_signatures() -> None:
    card, upstream = await served_card()
    assert upstream["capabilities"]["pushNotifications"] is True
    assert upstream["signatures"], "the test upstream signs its card"
    assert card["capabilities"]["pushNotifications"] is False
    assert "signatures" not in card
