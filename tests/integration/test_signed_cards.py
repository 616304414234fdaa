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


def verifier(public_key: str, key_id: str) -> Any:
    from jwt.api_jwk import PyJWK

    key = PyJWK({"kty": "OKP", "crv": "Ed25519", "x": public_key}, algorithm="EdDSA")

    def key_provider(kid: str | None, jku: str | None) -> PyJWK:
        assert kid == key_id and jku is None
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


def test_a_standalone_door_signs_its_card_with_its_own_key(
        tmp_path: Path, murmur_home: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from gateway.auth.tokens import b64url_encode
    from gateway.door.card_signing import key_id
    from tests.support.formation import ECHO_AGENT, write_capsule
    from tests.support.member import install_capsule, member_env, read_ready, start_member

    private = Ed25519PrivateKey.generate()
    key_file = tmp_path / "card-key.pem"
    key_file.write_bytes(private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    public = private.public_key().public_bytes_raw()
    project = tmp_path / "project"
    project.mkdir()
    install_capsule(project, write_capsule(tmp_path, "solo", ECHO_AGENT))
    member = read_ready(start_member(project, "local/solo", "--json", "--card-signing-key",
                                     str(key_file), env=member_env(murmur_home)))
    try:
        card = httpx.get(member.door + "/.well-known/agent-card.json", timeout=10,
                         headers={"Authorization": f"Bearer {member.token}"}).json()
    finally:
        member.kill()
    assert card["capabilities"]["extensions"][0]["params"]["signingKey"] == \
        b64url_encode(public)
    verify = verifier(b64url_encode(public), key_id(public))
    verify(as_sdk_card(card))
    # A file that is no Ed25519 key is a usage error naming it, and starts nothing.
    key_file.write_text("not a key")
    bad = start_member(project, "local/solo", "--card-signing-key", str(key_file),
                       env=member_env(murmur_home))
    _, err = bad.communicate(timeout=30)
    assert bad.returncode == 2
    assert f"--card-signing-key {key_file}: is not an unencrypted Ed25519" in err.decode()
