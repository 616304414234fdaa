"""The mft1 formation token: format (docs/door-auth.md, "Formation tokens"), strict
verification, the cache.

Attack tests are named after the attack. Tokens for payload attacks are signed with the
formation's real key, so the payload rule is the only reason they can be refused.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import json
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.auth import tokens
from gateway.auth.tokens import (
    MAX_TOKEN_BYTES,
    Claims,
    FormationKey,
    FormationVerifier,
    InvalidToken,
    b64url_decode_canonical,
    b64url_encode,
)
from gateway.protocol import MEMBER_NAME_RE

FORMATION = "frm_0190c0de00007000800000000000beef"
OTHER_FORMATION = "frm_0190c0de00007000800000000000cafe"
HAS_PYNACL = importlib.util.find_spec("nacl") is not None
BACKENDS = ["cryptography"] + (["pynacl"] if HAS_PYNACL else [])

PRIVATE = Ed25519PrivateKey.generate()
KEY = FormationKey(PRIVATE)
TOKEN = KEY.mint(formation=FORMATION, caller="planner", callee="coder")


def verifier(formation: str | None = FORMATION, **options: object) -> FormationVerifier:
    return FormationVerifier(KEY.public_bytes, formation, **options)  # type: ignore[arg-type]


def sign_payload(payload: bytes, private: Ed25519PrivateKey = PRIVATE,
                 prefix: str = "mft1") -> str:
    """A token whose payload is exactly ``payload``, validly signed with ``private``."""
    signed = f"{prefix}.{b64url_encode(payload)}"
    return f"{signed}.{b64url_encode(private.sign(signed.encode('ascii')))}"


def refuse(token: str, check: FormationVerifier | None = None) -> InvalidToken:
    """Assert ``token`` is refused, and that the refusal text never quotes it."""
    with pytest.raises(InvalidToken) as caught:
        (check or verifier()).verify(token)
    text = str(caught.value) + repr(caught.value)
    for part in {token, *token.split(".")}:
        if len(part) >= 8:
            assert part not in text
    return caught.value


class CountingCheck:
    """Stands in for the Ed25519 primitive and counts calls (proof of "no crypto")."""

    def __init__(self, real: Callable[[bytes, bytes], bool]) -> None:
        self.real = real
        self.calls = 0

    def __call__(self, signature: bytes, message: bytes) -> bool:
        self.calls += 1
        return self.real(signature, message)


def counted(check: FormationVerifier) -> CountingCheck:
    counter = CountingCheck(check._check)
    check._check = counter
    return counter


# -- the format --------------------------------------------------------------------------


def test_token_is_prefix_payload_signature_as_design_section_5() -> None:
    prefix, payload, signature = TOKEN.split(".")
    assert prefix == "mft1"
    assert base64.urlsafe_b64decode(payload + "==") == (
        b'{"formation":"frm_0190c0de00007000800000000000beef","from":"planner","to":"coder"}'
    )
    assert "=" not in TOKEN and "+" not in TOKEN and "/" not in TOKEN
    raw_signature = base64.urlsafe_b64decode(signature + "==")
    assert len(raw_signature) == 64
    # The prefix is signed: the signature covers the ASCII bytes "mft1.<payload>".
    PRIVATE.public_key().verify(raw_signature, f"mft1.{payload}".encode("ascii"))


def test_payload_is_sorted_keys_without_spaces() -> None:
    payload = base64.urlsafe_b64decode(TOKEN.split(".")[1] + "==")
    assert payload == json.dumps(
        {"to": "coder", "from": "planner", "formation": FORMATION},
        sort_keys=True, separators=(",", ":"),
    ).encode()


def test_verify_returns_the_claims() -> None:
    assert verifier().verify(TOKEN) == Claims(formation=FORMATION, caller="planner",
                                              callee="coder")


def test_public_bytes_are_the_raw_32_byte_key() -> None:
    assert KEY.public_bytes == PRIVATE.public_key().public_bytes_raw()
    assert len(FormationKey.generate().public_bytes) == 32


def test_each_generated_key_is_new() -> None:
    assert FormationKey.generate().public_bytes != FormationKey.generate().public_bytes


@pytest.mark.parametrize("field,value", [
    ("caller", "Planner"), ("caller", ""), ("callee", "coder "), ("callee", "c" * 33),
    ("callee", "1coder"), ("formation", ""), ("formation", 'frm_"x'), ("formation", "f" * 65),
])
def test_mint_refuses_names_the_verifier_would_refuse(field: str, value: str) -> None:
    names = {"formation": FORMATION, "caller": "planner", "callee": "coder"}
    names[field] = value
    with pytest.raises(ValueError, match=field):
        KEY.mint(**names)


def test_formation_key_repr_shows_only_the_public_half() -> None:
    text = repr(KEY)
    assert b64url_encode(KEY.public_bytes) in text
    from cryptography.hazmat.primitives import serialization
    seed = PRIVATE.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                 serialization.NoEncryption())
    assert b64url_encode(seed) not in text


def test_member_name_pattern_is_the_references() -> None:
    assert MEMBER_NAME_RE.pattern == "^[a-z][a-z0-9-]{0,31}$"
    assert MEMBER_NAME_RE.fullmatch("a") and MEMBER_NAME_RE.fullmatch("a" + "b-9" * 10 + "c")
    for bad in ("", "A", "9a", "a_b", "a" * 33, "coder\n", "cоder"):
        assert MEMBER_NAME_RE.fullmatch(bad) is None


# -- base64url ---------------------------------------------------------------------------


def reference_decode(text: str) -> bytes | None:
    """Canonical unpadded base64url spelled out: decode, re-encode, compare (None: refused)."""
    if any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
           for c in text):
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return raw if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == text else None


@settings(max_examples=400)
@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/= .\n",
               max_size=12))
def test_canonical_decode_is_decode_reencode_compare(text: str) -> None:
    expected = reference_decode(text)
    if expected is None:
        with pytest.raises(ValueError):
            b64url_decode_canonical(text)
    else:
        assert b64url_decode_canonical(text) == expected


@settings(max_examples=200)
@given(st.binary(max_size=70))
def test_encode_then_decode_round_trips(raw: bytes) -> None:
    text = b64url_encode(raw)
    assert "=" not in text
    assert b64url_decode_canonical(text) == raw


@pytest.mark.parametrize("text", ["QQ=", "QQ==", "QR", "QUJ", "a+b/", "QUJD\n", "QUJD ", "Q",
                                  "QUJDé", "QU JD"])
def test_non_canonical_base64url_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        b64url_decode_canonical(text)


# -- attacks on the token ----------------------------------------------------------------


def test_mft2_prefix_refused() -> None:
    refuse("mft2." + TOKEN[5:])


def test_paseto_v4_public_prefix_refused() -> None:
    _, payload, signature = TOKEN.split(".")
    refuse(f"v4.public.{payload}")
    refuse(f"v4.public.{payload}.{signature}")


def test_token_signed_under_another_prefix_refused() -> None:
    # A signature over "mft2.<payload>" must not verify as an mft1 token.
    forged = sign_payload(base64.urlsafe_b64decode(TOKEN.split(".")[1] + "=="), prefix="mft2")
    refuse("mft1." + forged.split(".", 1)[1])


@pytest.mark.parametrize("shape", ["{p}.{q}", "{p}.{q}.{s}.{s}", "{p}.{q}.{s}.", ".{p}.{q}.{s}",
                                   "{q}.{s}", "{p}", "{p}{q}{s}"])
def test_wrong_part_counts_refused(shape: str) -> None:
    prefix, payload, signature = TOKEN.split(".")
    refuse(shape.format(p=prefix, q=payload, s=signature))


@pytest.mark.parametrize("shape", ["{p}..{s}", "{p}.{q}.", "{p}..", "..", "", ".{q}.{s}"])
def test_empty_parts_refused(shape: str) -> None:
    prefix, payload, signature = TOKEN.split(".")
    refuse(shape.format(p=prefix, q=payload, s=signature))


def test_token_from_another_formations_key_refused() -> None:
    other = FormationKey.generate().mint(formation=FORMATION, caller="planner", callee="coder")
    refuse(other)


def test_token_of_another_formation_id_refused() -> None:
    refuse(KEY.mint(formation=OTHER_FORMATION, caller="planner", callee="coder"))


def test_door_in_no_formation_refuses_every_token() -> None:
    check = verifier(None)
    counter = counted(check)
    refuse(TOKEN, check)
    refuse(KEY.mint(formation=OTHER_FORMATION, caller="a", callee="b"), check)
    assert counter.calls == 0


def test_every_single_bit_flip_of_every_character_refused() -> None:
    check = verifier()
    for index in range(len(TOKEN)):
        for bit in range(8):
            flipped = chr(ord(TOKEN[index]) ^ (1 << bit))
            refuse(TOKEN[:index] + flipped + TOKEN[index + 1:], check)
    assert check._cache == {}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(part=st.sampled_from(["payload", "signature"]), position=st.integers(0, 10_000),
       bit=st.integers(0, 7))
def test_single_bit_flip_in_signed_bytes_refused(part: str, position: int, bit: int) -> None:
    """Flip one bit of the decoded payload or signature and re-encode canonically, so
    the flipped token passes every lexical check and reaches the signature."""
    prefix, payload_text, signature_text = TOKEN.split(".")
    raw = bytearray(b64url_decode_canonical(payload_text if part == "payload"
                                            else signature_text))
    raw[position % len(raw)] ^= 1 << bit
    text = b64url_encode(bytes(raw))
    forged = (f"{prefix}.{text}.{signature_text}" if part == "payload"
              else f"{prefix}.{payload_text}.{text}")
    refuse(forged)


def test_truncated_signature_refused() -> None:
    for cut in (1, 2, 4, 43, 85):
        refuse(TOKEN[:-cut])
    prefix, payload, signature = TOKEN.split(".")
    raw = b64url_decode_canonical(signature)
    refuse(f"{prefix}.{payload}.{b64url_encode(raw[:63])}")
    refuse(f"{prefix}.{payload}.{b64url_encode(raw + b'x')}")


@pytest.mark.parametrize("variant", ["padding", "plus-slash", "junk", "trailing-bits"])
@pytest.mark.parametrize("part", [1, 2])
def test_non_canonical_base64url_refused(variant: str, part: int) -> None:
    parts = TOKEN.split(".")
    text = parts[part]
    if variant == "padding":
        text += "=" * (-len(text) % 4 or 4)
    elif variant == "plus-slash":
        text = text.replace("-", "+").replace("_", "/")
        if text == parts[part]:
            text = "+" + text[1:]
    elif variant == "junk":
        text = text[:10] + "*" + text[10:]
    else:
        # Same decoded bytes, different text: set unused low bits of the last character.
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        text = text[:-1] + alphabet[alphabet.index(text[-1]) | 1]
        padded = text + "=" * (-len(text) % 4)
        assert base64.urlsafe_b64decode(padded) == b64url_decode_canonical(parts[part])
    parts[part] = text
    refuse(".".join(parts))


@pytest.mark.parametrize("payload", [b"[]", b'"planner"', b"42", b"null", b"true", b"",
                                     b"not json", b"\xff\xfe"])
def test_payload_not_an_object_refused(payload: bytes) -> None:
    refuse(sign_payload(payload))


def test_payload_with_duplicate_keys_refused() -> None:
    refuse(sign_payload(b'{"formation":"%s","from":"planner","to":"reviewer","to":"coder"}'
                        % FORMATION.encode()))
    refuse(sign_payload(b'{"formation":"%s","from":"planner","from":"planner","to":"coder"}'
                        % FORMATION.encode()))


@pytest.mark.parametrize("field,value", [
    ("to", 1), ("to", None), ("to", ["coder"]), ("to", {"name": "coder"}), ("from", True),
    ("formation", 7), ("to", 1.5),
])
def test_payload_with_wrong_types_refused(field: str, value: object) -> None:
    claims: dict[str, object] = {"formation": FORMATION, "from": "planner", "to": "coder"}
    claims[field] = value
    refuse(sign_payload(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()))


@pytest.mark.parametrize("change", ["extra", "missing", "renamed"])
def test_payload_with_other_keys_refused(change: str) -> None:
    claims: dict[str, object] = {"formation": FORMATION, "from": "planner", "to": "coder"}
    if change == "extra":
        claims["exp"] = 1
    elif change == "missing":
        del claims["formation"]
    else:
        claims["callee"] = claims.pop("to")
    refuse(sign_payload(json.dumps(claims, sort_keys=True, separators=(",", ":")).encode()))


def test_payload_deep_nesting_refused() -> None:
    refuse(sign_payload(b"[" * 200 + b"]" * 200))
    nested = '{"formation":"FRM","from":"planner","to":' + "[" * 100 + '"coder"' + "]" * 100
    refuse(sign_payload(nested.replace("FRM", FORMATION).encode() + b"}"))


@pytest.mark.parametrize("payload", [
    '{"formation": "%s", "from": "planner", "to": "coder"}',
    '{"to":"coder","from":"planner","formation":"%s"}',
    '{"formation":"%s","from":"planner","to":"\\u0063oder"}',
    ' {"formation":"%s","from":"planner","to":"coder"}',
    '{"formation":"%s","from":"planner","to":"coder"}\n',
])
def test_payload_not_in_canonical_json_refused(payload: str) -> None:
    refuse(sign_payload((payload % FORMATION).encode()))


@pytest.mark.parametrize("callee", ["Coder", "coder ", " coder", "c\u043eder", "coder\n",
                                    "ｃoder", "coder\u200b", "", "c" * 33, "co_der"])
def test_to_variants_refused(callee: str) -> None:
    payload = json.dumps({"formation": FORMATION, "from": "planner", "to": callee},
                         sort_keys=True, separators=(",", ":")).encode()
    refuse(sign_payload(payload))
    # Also without JSON's \u escaping: the raw UTF-8 spelling.
    raw = ('{"formation":"' + FORMATION + '","from":"planner","to":"' + callee + '"}').encode()
    refuse(sign_payload(raw))


def test_64_kib_token_refused_before_any_crypto(monkeypatch: pytest.MonkeyPatch) -> None:
    check = verifier()
    counter = counted(check)
    decoded: list[str] = []
    real_decode = tokens.b64url_decode_canonical
    monkeypatch.setattr(tokens, "b64url_decode_canonical",
                        lambda text: decoded.append(text) or real_decode(text))
    prefix, payload, signature = TOKEN.split(".")
    for huge in ("mft1." + "A" * 65_536, f"{prefix}.{payload}{'A' * 65_536}.{signature}",
                 TOKEN + "A" * (MAX_TOKEN_BYTES + 1 - len(TOKEN))):
        refuse(huge, check)
    assert counter.calls == 0
    assert decoded == []  # refused on length alone, before any decoding


def test_token_just_over_512_bytes_refused_before_crypto() -> None:
    check = verifier()
    counter = counted(check)
    refuse(TOKEN + "A" * (513 - len(TOKEN)), check)
    assert counter.calls == 0


def test_non_string_token_refused() -> None:
    with pytest.raises(InvalidToken):
        verifier().verify(TOKEN.encode())  # type: ignore[arg-type]


def test_malformed_tokens_never_reach_crypto() -> None:
    check = verifier()
    counter = counted(check)
    prefix, payload, signature = TOKEN.split(".")
    for bad in ("", "mft1", "mft1.", "mft2." + TOKEN[5:], f"{prefix}.{payload}=.{signature}",
                f"{prefix}.{payload}.{signature}=", sign_payload(b"[]"),
                KEY.mint(formation=OTHER_FORMATION, caller="a", callee="b")):
        refuse(bad, check)
    assert counter.calls == 0


# -- the cache ---------------------------------------------------------------------------


def test_verified_token_is_cached() -> None:
    check = verifier()
    counter = counted(check)
    first = check.verify(TOKEN)
    assert check.verify(TOKEN) is first
    assert counter.calls == 1


def test_failures_are_never_cached() -> None:
    check = verifier()
    counter = counted(check)
    prefix, payload, signature = TOKEN.split(".")
    forged = f"{prefix}.{payload}.{b64url_encode(bytes(64))}"
    refuse(forged, check)
    refuse(forged, check)
    assert counter.calls == 2
    assert check._cache == {}


def test_cache_is_keyed_by_the_exact_string() -> None:
    check = verifier()
    check.verify(TOKEN)
    counter = counted(check)
    for near in (TOKEN + " ", " " + TOKEN, TOKEN + "\n", TOKEN.upper()):
        refuse(near, check)
    assert list(check._cache) == [TOKEN]
    assert counter.calls == 0


def test_cache_is_bounded() -> None:
    check = verifier(cache_size=3)
    minted = [KEY.mint(formation=FORMATION, caller=f"m{i}", callee="coder") for i in range(6)]
    for item in minted:
        check.verify(item)
    assert len(check._cache) == 3
    assert list(check._cache) == minted[-3:]  # oldest dropped first
    assert check.verify(minted[0]).caller == "m0"  # still verifies, just not cached


def test_cache_is_per_verifier() -> None:
    verifier().verify(TOKEN)
    refuse(TOKEN, FormationVerifier(KEY.public_bytes, OTHER_FORMATION))
    refuse(TOKEN, FormationVerifier(FormationKey.generate().public_bytes, FORMATION))


# -- backends and construction -----------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_agree(backend: str) -> None:
    check = FormationVerifier(KEY.public_bytes, FORMATION, backend=backend)
    assert check.verify(TOKEN).caller == "planner"
    prefix, payload, signature = TOKEN.split(".")
    raw = bytearray(b64url_decode_canonical(signature))
    raw[10] ^= 1
    refuse(f"{prefix}.{payload}.{b64url_encode(bytes(raw))}", check)


def test_default_backend_is_the_fastest_installed() -> None:
    assert tokens.ed25519_backend() == ("pynacl" if HAS_PYNACL else "cryptography")


@pytest.mark.parametrize("public", [b"", b"x" * 31, b"x" * 33, "x" * 32])
def test_verifier_refuses_a_malformed_public_key(public: object) -> None:
    with pytest.raises(ValueError, match="32 raw bytes"):
        FormationVerifier(public, FORMATION)  # type: ignore[arg-type]


def test_verifier_refuses_an_unknown_backend() -> None:
    with pytest.raises(ValueError, match="backend"):
        FormationVerifier(KEY.public_bytes, FORMATION, backend="openssl3")


def test_verifier_refuses_a_malformed_formation() -> None:
    with pytest.raises(ValueError, match="formation"):
        FormationVerifier(KEY.public_bytes, 'frm_"')


# -- the payload grammar is exactly canonical JSON with valid names ----------------------

names = st.from_regex(r"\A[a-z][a-z0-9-]{0,31}\Z")


@settings(max_examples=100, deadline=None)
@given(caller=names, callee=names)
def test_every_valid_pair_of_names_round_trips(caller: str, callee: str) -> None:
    check = verifier()
    claims = check.verify(KEY.mint(formation=FORMATION, caller=caller, callee=callee))
    assert (claims.caller, claims.callee) == (caller, callee)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6) | names,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(extra=st.dictionaries(st.sampled_from(["formation", "from", "to", "x"]), json_values,
                             max_size=4),
       sort=st.booleans(), spaced=st.booleans())
def test_only_the_canonical_payload_of_three_valid_strings_verifies(
    extra: dict[str, object], sort: bool, spaced: bool,
) -> None:
    claims: dict[str, object] = {"formation": FORMATION, "from": "planner", "to": "coder"}
    claims.update(extra)
    payload = json.dumps(claims, sort_keys=sort,
                         separators=(", ", ": ") if spaced else (",", ":")).encode()
    canonical = json.dumps({"formation": FORMATION, "from": claims.get("from"),
                            "to": claims.get("to")}, sort_keys=True, separators=(",", ":"))
    valid = (
        set(claims) == {"formation", "from", "to"} and claims["formation"] == FORMATION
        and all(isinstance(claims[k], str) and MEMBER_NAME_RE.fullmatch(claims[k])  # type: ignore[arg-type]
                for k in ("from", "to"))
        and payload == canonical.encode()
    )
    token = sign_payload(payload)
    if valid:
        assert verifier().verify(token).callee == claims["to"]
    else:
        refuse(token)
