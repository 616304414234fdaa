"""Signed agent cards (docs/audit.md, "Signed agent cards") in a real formation: the
launcher signs every member's card with the formation key, each door serves the
signature, and a2a-sdk's own verifier accepts each card under the key in
formation.json, and refuses a card with one byte changed."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.home.formations import formation_dir
from launcher.home.records import OPERATOR_TOKEN_FILE, read_operator_token
from launcher.home.running_records import list_live
from tests.support.formation import (
    PLANNER_AGENT,
    kill_group_quietly,
    mur,
    read_formation_line,
    simple_project,
    start_launcher,
)

pytestmark = pytest.mark.integration
signing = pytest.importorskip("a2a.utils.signing", reason="a2a-sdk's signing extra")


def signed_cards(formation_id: str, names: set[str]) -> dict[str, dict[str, Any]]:
    """Each member's card as its door serves it, once every one is signed (10 s)."""
    deadline = time.monotonic() + 10
    while True:
        cards = {}
        for record in list_live():
            if record.kind != "session" or record.formation_id != formation_id:
                continue
            assert record.door_url and record.records_dir and record.member
            token = read_operator_token(Path(record.records_dir) / OPERATOR_TOKEN_FILE)
            card = httpx.get(record.door_url + "/.well-known/agent-card.json", timeout=10,
                             headers={"Authorization": f"Bearer {token}"}).json()
            if card.get("signatures"):
                cards[record.member] = card
        if set(cards) == names:
            return cards
        assert time.monotonic() < deadline, f"signed so far: {sorted(cards)}"
        time.sleep(0.2)


def verifier(public_key: str, formation_id: str) -> Any:
    from jwt.api_jwk import PyJWK

    key = PyJWK({"kty": "OKP", "crv": "Ed25519", "x": public_key}, algorithm="EdDSA")

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        assert kid == formation_id and jku is None
        return key

    return signing.create_signature_verifier(key_provider, ["EdDSA"])


def as_sdk_card(card: dict[str, Any]) -> Any:
    from a2a.types import AgentCard
    from google.protobuf.json_format import ParseDict

    return ParseDict(card, AgentCard(), ignore_unknown_fields=True)


def test_every_members_card_verifies_with_a2a_sdk_under_the_formation_key(
        tmp_path: Path, murmur_home: Path) -> None:
    project = simple_project(tmp_path, ["planner", "coder", "reviewer"], entry="planner",
                             reachability={"planner": ["coder", "reviewer"]},
                             agents={"planner": PLANNER_AGENT})
    process: subprocess.Popen[bytes] = start_launcher(project, "--json")
    formation_id = read_formation_line(process)["formation_id"]
    try:
        cards = signed_cards(formation_id, {"planner", "coder", "reviewer"})
        public_key = json.loads((formation_dir(formation_id) / "formation.json")
                                .read_text())["public_key"]
        verify = verifier(public_key, formation_id)
        for name, card in cards.items():
            [signature] = card["signatures"]
            extension = card["capabilities"]["extensions"][0]
            assert extension["params"]["signingKey"] == public_key, name
            verify(as_sdk_card(card))                     # raises when it does not verify
            changed = json.loads(json.dumps(card))
            changed["description"] = changed["description"][:-1] + "!"
            with pytest.raises(signing.InvalidSignaturesError):
                verify(as_sdk_card(changed))
            header = json.loads(base64.urlsafe_b64decode(signature["protected"] + "=="))
            assert header == {"alg": "EdDSA", "typ": "JOSE", "kid": formation_id}
        # Another key does not verify them.
        from gateway.auth.tokens import FormationKey, b64url_encode

        other = verifier(b64url_encode(FormationKey.generate().public_bytes), formation_id)
        with pytest.raises(signing.InvalidSignaturesError):
            other(as_sdk_card(cards["coder"]))
    finally:
        mur("stop", formation_id)
        try:
            process.wait(30)
        finally:
            kill_group_quietly(process)
