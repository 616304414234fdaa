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


# --- network.push (docs/push.md) ----------------------------------------------------------

GATEWAY = ("manifest_version: 1\nname: gw\nversion: 1.0.0\n"
           "agent: {a2a: {url: 'http://127.0.0.1:9999'}}\n")


def test_push_is_off_by_default_and_its_allow_list_is_read() -> None:
    assert parse_manifest(MINIMAL).network.push.allow == []
    manifest = parse_manifest(MINIMAL + "network:\n  push: {allow: ['hooks.example.com:443',"
                                        " '127.0.0.1:8099', localhost]}\n")
    assert manifest.network.push.allow == ["hooks.example.com:443", "127.0.0.1:8099",
                                           "localhost"]


@pytest.mark.parametrize("entry", ["http://hooks.example.com", "hooks.example.com/path", ""])
def test_a_push_entry_that_is_no_host_is_refused_naming_the_field(entry: str) -> None:
    refused = refusal(MINIMAL + f"network: {{push: {{allow: ['{entry}']}}}}\n")
    assert refused.code == "E-MAN-001"
    assert "network.push.allow" in refused.diagnostic.message


def test_push_beside_a_gateway_agent_is_refused() -> None:
    refused = refusal(GATEWAY + "network: {push: {allow: ['127.0.0.1:8099']}}\n")
    assert refused.code == "E-MAN-001"
    assert "network.push.allow" in refused.diagnostic.message
    assert "gateway member sends no push notifications" in refused.diagnostic.message


def test_push_methods_are_declarable_scopes_and_never_default_ones() -> None:
    manifest = parse_manifest(MINIMAL + "network:\n  authentication: {bearer: [\n"
                              "    {name: a, env: A_TOKEN},\n"
                              "    {name: b, env: B_TOKEN, scopes: [GetTask, "
                              "CreateTaskPushNotificationConfig]}]}\n")
    default, named = manifest.network.authentication.bearer  # type: ignore[union-attr]
    assert not any("Push" in scope for scope in default.scopes)
    assert named.scopes == ["GetTask", "CreateTaskPushNotificationConfig"]
