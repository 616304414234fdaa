"""murmur.yaml's ``network.cors`` and ``network.public_card`` (docs/manifest keys in
docs/bindings.md), and how the member runtime hands them to the door's policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.auth.credentials import OperatorToken
from gateway.auth.door_auth import AuthPolicy
from launcher.admission.manifest import parse_manifest
from launcher.diagnostics import DiagnosticError
from launcher.member.door import auth_policy
from launcher.member.place import FormationPlace

MINIMAL = "manifest_version: 1\nname: coder\nversion: 1.0.0\nagent: {python: coder_agent:run}\n"


def refusal(text: str) -> DiagnosticError:
    with pytest.raises(DiagnosticError) as refused:
        parse_manifest(text)
    return refused.value


def test_cors_and_public_card_are_off_by_default() -> None:
    manifest = parse_manifest(MINIMAL)
    assert manifest.network.cors.allow_origins == []
    assert manifest.network.public_card is False


def test_cors_origins_and_public_card_are_read() -> None:
    manifest = parse_manifest(MINIMAL + "network:\n  authentication: {}\n  public_card: true\n"
                              "  cors: {allow_origins: ['http://localhost:5173', '*',"
                              " 'https://app.example.com', 'http://127.0.0.1:8080']}\n")
    assert manifest.network.public_card is True
    assert manifest.network.cors.allow_origins == [
        "http://localhost:5173", "*", "https://app.example.com", "http://127.0.0.1:8080"]


@pytest.mark.parametrize("origin", [
    "localhost:5173", "ftp://example.com", "http://example.com/", "http://example.com/app",
    "http://user@example.com", "http://Example.com", "http://", "https://a.com?x=1", "",
])
def test_an_origin_that_is_not_one_is_refused_naming_the_field(origin: str) -> None:
    refused = refusal(MINIMAL + f"network: {{cors: {{allow_origins: ['{origin}']}}}}\n")
    assert refused.code == "E-MAN-001"
    assert "network.cors.allow_origins" in refused.diagnostic.message
    assert "Origin" in refused.diagnostic.hint


def test_public_card_must_be_a_boolean_and_cors_takes_no_other_key() -> None:
    assert refusal(MINIMAL + "network: {public_card: 'yes'}\n").code == "E-MAN-001"
    unknown = refusal(MINIMAL + "network: {cors: {allow_origin: ['*']}}\n")
    assert unknown.code == "E-MAN-001" and "allow_origin" in unknown.diagnostic.message


def _policy(text: str) -> AuthPolicy:
    return auth_policy(parse_manifest(text), operator=OperatorToken.generate(),
                       place=FormationPlace(), capsule_dir=Path("."), environ={},
                       capsule="local/coder")


def test_the_door_policy_carries_the_origins_and_the_public_card() -> None:
    policy = _policy(MINIMAL + "network:\n  authentication: {}\n  public_card: true\n"
                     "  cors: {allow_origins: ['http://localhost:5173']}\n")
    assert policy.public_card is True
    assert policy.allow_origins == ("http://localhost:5173",)
    public = _policy(MINIMAL + "network: {cors: {allow_origins: ['*']}}\n")
    assert public.authenticated is False
    assert public.allow_origins == ("*",)
