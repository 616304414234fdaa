"""Signed agent cards at the door (gateway/door/card_signing.py, gateway/door/card.py):
the canonical form a2a-sdk computes, a signature served only when it verifies, never on
the public card, and dropped when the card changes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from gateway.auth.credentials import OperatorToken
from gateway.auth.door_auth import AuthPolicy
from gateway.auth.tokens import FormationKey, b64url_encode
from gateway.door.app import DoorSettings, build_door
from gateway.door.card import build_card
from gateway.door.card_signing import canonical_card, card_signature, signature_valid
from gateway.door.tasks import TaskRun
from tests.support.door import card_info

KEY = FormationKey.generate()
OPERATOR = OperatorToken.generate()


async def agent(task: TaskRun) -> str:
    return "ok"


def test_the_canonical_form_is_the_one_a2a_sdk_computes() -> None:
    signing = pytest.importorskip("a2a.utils.signing", reason="a2a-sdk's signing extra")
    from a2a.types import AgentCard
    from google.protobuf.json_format import ParseDict

    card = build_card(card_info(signing_key=b64url_encode(KEY.public_bytes)),
                      authenticated=True)
    parsed = ParseDict(card, AgentCard(), ignore_unknown_fields=True)
    assert signing._canonicalize_agent_card(parsed).encode() == canonical_card(card)  # noqa: SLF001
    # Empty values and the signatures themselves are not covered.
    assert canonical_card({**card, "signatures": [{"x": "y"}], "note": ""}) == \
        canonical_card(card)


def test_a_signature_verifies_only_for_its_card_and_key() -> None:
    card = build_card(card_info(), authenticated=True)
    signature = card_signature(card, KEY.sign, "frm_0456")
    assert signature_valid(card, signature, KEY.public_bytes)
    assert not signature_valid({**card, "version": "9"}, signature, KEY.public_bytes)
    assert not signature_valid(card, signature, FormationKey.generate().public_bytes)
    assert not signature_valid(card, {"protected": "e30", "signature": "AA"},
                               KEY.public_bytes)


async def fetch(app: Any, token: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1:8000") as client:
        card: dict[str, Any] = (await client.get("/.well-known/agent-card.json",
                                                 headers=headers)).json()
    return card


async def test_the_door_serves_a_signature_that_verifies_and_refuses_one_that_does_not(
        ) -> None:
    door = build_door(agent, DoorSettings(card=card_info(
        signing_key=b64url_encode(KEY.public_bytes))),
        policy=AuthPolicy(authenticated=True, operator=OPERATOR, public_card=True))
    card = await fetch(door.app, OPERATOR.value)
    assert "signatures" not in card
    forged = card_signature(card, FormationKey.generate().sign, "frm_0456")
    assert door.sign_card(forged, KEY.public_bytes) is False
    assert "signatures" not in await fetch(door.app, OPERATOR.value)
    signature = card_signature(card, KEY.sign, "frm_0456")
    assert door.sign_card(signature, KEY.public_bytes) is True
    served = await fetch(door.app, OPERATOR.value)
    assert served["signatures"] == [signature]
    assert signature_valid(served, signature, KEY.public_bytes)
    # The public card has no session extension, so the signature is not on it.
    assert "signatures" not in await fetch(door.app, None)
    # A new URL is a new card: the old signature goes.
    door.set_url("http://127.0.0.1:9999")
    assert "signatures" not in await fetch(door.app, OPERATOR.value)
    assert json.dumps(served["capabilities"]["extensions"][0]["params"]["signingKey"]) == \
        json.dumps(b64url_encode(KEY.public_bytes))
