"""The credential kinds: operator token, declared bearer tokens, declared JWT issuers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from gateway.auth.credentials import (
    MAX_JWT_SUBJECT_CHARS,
    OPERATOR_CREDENTIAL,
    CredentialError,
    DeclaredBearer,
    JwtIssuer,
    JwtKey,
    OperatorToken,
    member_credential,
)
from gateway.auth.tokens import InvalidToken, b64url_decode_canonical
from gateway.caller import (
    FORMATION_SCOPES,
    OPERATOR_METHODS,
    PUBLIC_CALLER,
    TASK_METHODS,
    Credential,
)

ISSUER = "https://id.example"
AUDIENCE = "coder"

# -- operator ----------------------------------------------------------------------------


def test_operator_token_is_32_random_bytes_as_base64url() -> None:
    token = OperatorToken.generate()
    assert len(b64url_decode_canonical(token.value)) == 32
    assert OperatorToken.generate().value != token.value


def test_operator_token_matches_only_itself() -> None:
    token = OperatorToken.generate()
    assert token.matches(token.value)
    assert OperatorToken(token.value).matches(token.value)
    for other in ("", token.value[:-1], token.value + "x", token.value.upper(), " " + token.value,
                  "é" * 10, "\udcff"):
        assert not token.matches(other)


def test_operator_token_compares_with_hmac_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.auth.credentials as credentials

    calls: list[tuple[bytes, bytes]] = []
    real = credentials.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(credentials.hmac, "compare_digest", spy)
    token = OperatorToken.generate()
    assert not token.matches("wrong")
    assert len(calls) == 1


def test_operator_token_never_in_its_repr() -> None:
    token = OperatorToken.generate()
    for text in (repr(token), str(token), f"{token}", repr([token])):
        assert token.value not in text


def test_operator_credential_has_every_method() -> None:
    credential = OperatorToken.generate().credential
    assert (credential.kind, credential.name) == ("operator", "operator")
    assert credential.scopes == OPERATOR_METHODS


@pytest.mark.parametrize("value", ["", "tiny-x", "has space in it, long enough",
                                   "mft1.looks-like-a-formation-token", "tab\there-long-enough"])
def test_operator_token_refuses_unusable_values_without_quoting_them(value: str) -> None:
    with pytest.raises(CredentialError) as caught:
        OperatorToken(value)
    if value:
        assert value not in str(caught.value)
    assert "operator token" in str(caught.value)


# -- declared bearer ---------------------------------------------------------------------

CI_TOKEN = "ci-secret-7c0ffee-0123456789abcdef"


def test_declared_bearer_from_env() -> None:
    bearer = DeclaredBearer.from_env("ci", "CI_DOOR_TOKEN", ["SendMessage", "GetTask"],
                                     {"CI_DOOR_TOKEN": CI_TOKEN})
    assert bearer.matches(CI_TOKEN)
    assert not bearer.matches(CI_TOKEN + "x")
    credential = bearer.credential
    assert (credential.kind, credential.name) == ("bearer", "bearer:ci")
    assert credential.scopes == frozenset({"SendMessage", "GetTask"})


def test_declared_scopes_default_to_every_task_method() -> None:
    bearer = DeclaredBearer.from_env("ci", "CI_DOOR_TOKEN", None, {"CI_DOOR_TOKEN": CI_TOKEN})
    assert bearer.credential.scopes == TASK_METHODS
    assert DeclaredBearer("ci", CI_TOKEN).scopes == TASK_METHODS


@pytest.mark.parametrize("environ,state", [({}, "is not set"), ({"CI_DOOR_TOKEN": ""}, "is empty")])
def test_missing_env_var_names_the_variable(environ: dict[str, str], state: str) -> None:
    with pytest.raises(CredentialError) as caught:
        DeclaredBearer.from_env("ci", "CI_DOOR_TOKEN", None, environ)
    text = str(caught.value)
    assert "CI_DOOR_TOKEN" in text and state in text and "'ci'" in text


@pytest.mark.parametrize("value", ["with space", "newline\n", "quote\"d", "mft1.abc.def", "é"])
def test_unusable_env_token_names_the_variable_never_the_value(value: str) -> None:
    with pytest.raises(CredentialError) as caught:
        DeclaredBearer.from_env("ci", "CI_DOOR_TOKEN", None, {"CI_DOOR_TOKEN": value})
    assert "CI_DOOR_TOKEN" in str(caught.value)
    assert value not in str(caught.value)


def test_declared_bearer_never_shows_its_token() -> None:
    bearer = DeclaredBearer("ci", CI_TOKEN, frozenset({"GetTask"}))
    assert CI_TOKEN not in repr(bearer)
    assert CI_TOKEN not in repr(bearer.credential)


@pytest.mark.parametrize("scopes,fault", [
    (["GetTask", "getTask"], "unknown scope 'getTask'"),
    ([], "scopes is empty"),
    ("GetTask", "list of method names"),
])
def test_declared_scopes_are_checked(scopes: Any, fault: str) -> None:
    with pytest.raises(CredentialError, match=fault):
        DeclaredBearer("ci", CI_TOKEN, scopes)


def test_declared_bearer_may_hold_operator_only_methods_when_declared() -> None:
    bearer = DeclaredBearer("ops", CI_TOKEN, frozenset({"murmur.StopSession", "resources/files"}))
    assert bearer.credential.scopes == {"murmur.StopSession", "resources/files"}


@pytest.mark.parametrize("name", ["", "bearer:ci", "has space", "x" * 65])
def test_declared_bearer_name_is_checked(name: str) -> None:
    with pytest.raises(CredentialError, match="name"):
        DeclaredBearer(name, CI_TOKEN)


# -- formation ---------------------------------------------------------------------------


def test_member_credential_has_exactly_the_five_formation_scopes() -> None:
    credential = member_credential("planner")
    assert (credential.kind, credential.name, credential.member) == (
        "member", "member:planner", "planner")
    assert credential.scopes == FORMATION_SCOPES == frozenset(
        {"SendMessage", "GetTask", "CancelTask", "ListTasks", "SubscribeToTask"})


# -- declared JWT issuers ----------------------------------------------------------------


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "build-42", "exp": now + 300,
                            "iat": now}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


@pytest.fixture(scope="module")
def ed_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"keys": list(entries)}


def public_jwk(private: Any, kid: str, **extra: Any) -> dict[str, Any]:
    public = private.public_key()
    if isinstance(public, ed25519.Ed25519PublicKey):
        jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
    return {**jwk, "kid": kid, **extra}


@pytest.fixture()
def corp(tmp_path: Path, ed_key: Any, ec_key: Any) -> JwtIssuer:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(public_jwk(ed_key, "ed"), public_jwk(ec_key, "ec"))))
    return JwtIssuer.from_jwks_file("corp", ISSUER, AUDIENCE, ["EdDSA", "ES256"], path,
                                    ["SendMessage", "GetTask"])


def test_jwt_from_jwks_file_accepts_each_allowed_key(corp: JwtIssuer, ed_key: Any,
                                                     ec_key: Any) -> None:
    for key, alg, kid in ((ed_key, "EdDSA", "ed"), (ec_key, "ES256", "ec")):
        token = jwt.encode(claims(), key, algorithm=alg, headers={"kid": kid})
        assert corp.verify(token)["sub"] == "build-42"
        assert corp.accepts(token)
    token = jwt.encode(claims(), ed_key, algorithm="EdDSA")  # no kid: every key is tried
    assert corp.accepts(token)
    assert (corp.credential.kind, corp.credential.name) == ("jwt", "jwt:corp")
    assert corp.credential.scopes == {"SendMessage", "GetTask"}


def test_jwt_from_pem_file(tmp_path: Path, rsa_key: Any) -> None:
    path = tmp_path / "corp.pem"
    path.write_bytes(rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    issuer = JwtIssuer.from_pem_file("corp", ISSUER, AUDIENCE, ["RS256", "PS256"], path)
    assert issuer.accepts(jwt.encode(claims(), rsa_key, algorithm="RS256"))
    assert issuer.accepts(jwt.encode(claims(), rsa_key, algorithm="PS256"))
    assert not issuer.accepts(jwt.encode(claims(), rsa_key, algorithm="RS512"))
    assert issuer.credential.scopes == TASK_METHODS


def refuse(issuer: JwtIssuer, token: str) -> str:
    with pytest.raises(InvalidToken) as caught:
        issuer.verify(token)
    text = str(caught.value)
    for part in token.split("."):
        if len(part) >= 8:
            assert part not in text
    return text


def test_jwt_alg_none_refused(corp: JwtIssuer) -> None:
    token = jwt.encode(claims(), None, algorithm="none")
    assert "algorithm not allowed" in refuse(corp, token)


def test_jwt_hs256_signed_with_the_public_key_refused(tmp_path: Path, ec_key: Any,
                                                      corp: JwtIssuer) -> None:
    """Key confusion: HMAC "signed" with the issuer's public key as the secret."""
    import base64
    import hashlib
    import hmac

    pem = ec_key.public_key().public_bytes(serialization.Encoding.PEM,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "ec"}).encode())
    body = b64(json.dumps(claims()).encode())
    mac = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    refuse(corp, f"{head}.{body}.{b64(mac)}")


def test_jwt_algorithm_not_on_the_allow_list_refused(tmp_path: Path, ec_key: Any) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(public_jwk(ec_key, "ec"))))
    issuer = JwtIssuer.from_jwks_file("corp", ISSUER, AUDIENCE, ["ES256"], path)
    ec384 = ec.generate_private_key(ec.SECP384R1())
    refuse(issuer, jwt.encode(claims(), ec384, algorithm="ES384", headers={"kid": "ec"}))


def test_jwt_algorithm_is_pinned_by_the_key_type(corp: JwtIssuer, ec_key: Any) -> None:
    # An EdDSA header naming the EC key's kid: no key of that type, refused.
    token = jwt.encode(claims(), ed25519.Ed25519PrivateKey.generate(), algorithm="EdDSA",
                       headers={"kid": "ec"})
    refuse(corp, token)


@pytest.mark.parametrize("change,rule", [
    ({"exp": None}, "MissingRequiredClaimError"),
    ({"exp": int(time.time()) - 3600}, "ExpiredSignatureError"),
    ({"iss": "https://evil.example"}, "InvalidIssuerError"),
    ({"iss": None}, "MissingRequiredClaimError"),
    ({"aud": "reviewer"}, "InvalidAudienceError"),
    ({"aud": None}, "MissingRequiredClaimError"),
    ({"nbf": int(time.time()) + 3600}, "ImmatureSignatureError"),
])
def test_jwt_claims_are_validated(corp: JwtIssuer, ed_key: Any, change: dict[str, Any],
                                  rule: str) -> None:
    token = jwt.encode(claims(**change), ed_key, algorithm="EdDSA", headers={"kid": "ed"})
    assert rule in refuse(corp, token)


def test_jwt_expiry_has_60_seconds_leeway(corp: JwtIssuer, ed_key: Any) -> None:
    now = int(time.time())
    assert corp.accepts(jwt.encode(claims(exp=now - 30), ed_key, algorithm="EdDSA"))
    assert not corp.accepts(jwt.encode(claims(exp=now - 90), ed_key, algorithm="EdDSA"))


def test_jwt_from_another_key_refused(corp: JwtIssuer) -> None:
    stranger = ed25519.Ed25519PrivateKey.generate()
    refuse(corp, jwt.encode(claims(), stranger, algorithm="EdDSA", headers={"kid": "ed"}))
    refuse(corp, jwt.encode(claims(), stranger, algorithm="EdDSA"))


def test_jwt_unknown_kid_refused(corp: JwtIssuer, ed_key: Any) -> None:
    refuse(corp, jwt.encode(claims(), ed_key, algorithm="EdDSA", headers={"kid": "nope"}))


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", "e30.e30.", "....", "x" * 5000])
def test_jwt_garbage_refused(corp: JwtIssuer, token: str) -> None:
    with pytest.raises(InvalidToken):
        corp.verify(token)


@pytest.mark.parametrize("algorithms", [["none"], ["HS256"], [], ["EdDSA", "HS512"], "EdDSA"])
def test_jwt_issuer_refuses_unsafe_algorithm_lists(algorithms: Any, ed_key: Any) -> None:
    key = JwtKey(key=ed_key.public_key(), algorithms=frozenset({"EdDSA"}))
    with pytest.raises(CredentialError, match="algorithms"):
        JwtIssuer("corp", ISSUER, AUDIENCE, algorithms, [key])


def test_jwks_with_a_private_key_refused_without_quoting_it(tmp_path: Path, ec_key: Any) -> None:
    private_jwk = json.loads(ECAlgorithm.to_jwk(ec_key))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(private_jwk)))
    with pytest.raises(CredentialError, match="private or symmetric") as caught:
        JwtIssuer.from_jwks_file("corp", ISSUER, AUDIENCE, ["ES256"], path)
    assert private_jwk["d"] not in str(caught.value)


def test_jwks_symmetric_key_refused(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks({"kty": "oct", "k": "c2VjcmV0"})))
    with pytest.raises(CredentialError, match="private or symmetric"):
        JwtIssuer.from_jwks_file("corp", ISSUER, AUDIENCE, ["ES256"], path)


def test_pem_with_a_private_key_refused(tmp_path: Path, ec_key: Any) -> None:
    path = tmp_path / "key.pem"
    path.write_bytes(ec_key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    with pytest.raises(CredentialError, match="private key"):
        JwtIssuer.from_pem_file("corp", ISSUER, AUDIENCE, ["ES256"], path)


@pytest.mark.parametrize("content,fault", [
    (None, "cannot read"), ("not json", "is not JSON"), ("{}", "has no 'keys' list"),
    ('{"keys": [1]}', "is not a JSON object"),
    ('{"keys": [{"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}]}', "not a usable public key"),
])
def test_bad_jwks_files_name_the_file(tmp_path: Path, content: str | None, fault: str) -> None:
    path = tmp_path / "jwks.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CredentialError) as caught:
        JwtIssuer.from_jwks_file("corp", ISSUER, AUDIENCE, ["ES256"], path)
    assert fault in str(caught.value) and "jwks.json" in str(caught.value)


def test_keys_that_fit_no_allowed_algorithm_refused(tmp_path: Path, rsa_key: Any) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(public_jwk(rsa_key, "rsa"))))
    with pytest.raises(CredentialError, match="no key can verify"):
        JwtIssuer.from_jwks_file("corp", ISSUER, AUDIENCE, ["EdDSA"], path)


def test_jwk_alg_narrows_the_key(tmp_path: Path, rsa_key: Any) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(public_jwk(rsa_key, "rsa", alg="PS256"))))
    issuer = JwtIssuer.from_jwks_file("corp", ISSUER, AUDIENCE, ["RS256", "PS256"], path)
    assert issuer.accepts(jwt.encode(claims(), rsa_key, algorithm="PS256"))
    assert not issuer.accepts(jwt.encode(claims(), rsa_key, algorithm="RS256"))


# -- who owns a credential's tasks (issue 10: one identity per JWT subject) ----------------


def test_every_credential_but_a_jwt_owns_its_tasks_under_its_own_name() -> None:
    bearer = DeclaredBearer("ci", "ci-token-0123456789abcdef").credential
    for credential in (OPERATOR_CREDENTIAL, bearer, member_credential("planner"),
                       PUBLIC_CALLER.credential):
        assert credential.owner == credential.name
    assert Credential("jwt", "jwt:corp", TASK_METHODS, owner="jwt:corp/a").owner == "jwt:corp/a"


def test_two_subjects_of_one_issuer_are_two_owners_under_one_name(corp: JwtIssuer,
                                                                  ed_key: Any) -> None:
    alice, bob = (corp.authenticate(jwt.encode(claims(sub=sub), ed_key, algorithm="EdDSA"))
                  for sub in ("alice", "bob"))
    assert (alice.owner, bob.owner) == ("jwt:corp/alice", "jwt:corp/bob")
    for credential in (alice, bob):
        assert (credential.kind, credential.name) == ("jwt", "jwt:corp")
        assert credential.scopes == corp.credential.scopes == {"SendMessage", "GetTask"}
    # The issuer's name holds no "/": whatever a subject spells, it owns under this one.
    tricky = corp.authenticate(jwt.encode(claims(sub="x/../jwt:other/alice"), ed_key,
                                          algorithm="EdDSA"))
    assert tricky.owner == "jwt:corp/x/../jwt:other/alice"


@pytest.mark.parametrize("sub", [None, "", "s" * 256, 42, ["alice"]],
                         ids=["absent", "empty", "256 characters", "a number", "a list"])
def test_jwt_without_a_usable_sub_is_refused_by_authenticate(corp: JwtIssuer, ed_key: Any,
                                                             sub: Any) -> None:
    token = jwt.encode(claims(sub=sub), ed_key, algorithm="EdDSA")
    with pytest.raises(InvalidToken) as caught:
        corp.authenticate(token)
    assert str(caught.value).startswith("jwt corp: ")
    assert not corp.accepts(token)


def test_jwt_sub_of_255_characters_is_the_longest_accepted(corp: JwtIssuer,
                                                           ed_key: Any) -> None:
    assert MAX_JWT_SUBJECT_CHARS == 255
    token = jwt.encode(claims(sub="s" * 255), ed_key, algorithm="EdDSA")
    assert corp.authenticate(token).owner == "jwt:corp/" + "s" * 255
