"""Signed agent cards (A2A 1.0, section 8.4; docs/audit.md, "Signed agent cards").

A card's signature is a JWS with a detached payload: ``protected`` is the base64url of
the header ``{"alg": "EdDSA", "typ": "JOSE", "kid": ...}``, ``signature`` the base64url
Ed25519 signature of ``<protected>.<base64url(canonical card)>``. The canonical card is
the card without ``signatures``, with every empty string, list and object (and ``null``)
removed, serialized by RFC 8785 (JCS): keys sorted, no spaces, UTF-8. That is the form
a2a-sdk's verifier computes, so its ``create_signature_verifier`` checks a door's card.
The door's card omits ``required: false`` on its extension for the same reason (the SDK
reads the card through protobuf, which drops that default).

In order: :func:`canonical_card`, :func:`card_signature` (made by whoever holds the key:
the launcher with the formation key, or a standalone door with ``--card-signing-key``),
:func:`signature_valid` (the door checks a signature it is handed against the card it
serves, so it never serves one that does not verify), :func:`key_id` (a standalone
key's ``kid``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ALGORITHM", "canonical_card", "card_signature", "key_id", "signature_valid"]

ALGORITHM = "EdDSA"
#: The deepest nesting a card may have to be signed (the SDK refuses deeper ones too).
_MAX_DEPTH = 64


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _clean(value: Any, depth: int = 1) -> Any:
    """``value`` without empty strings, lists, objects and nulls, at any depth."""
    if depth > _MAX_DEPTH:
        raise ValueError("the card nests too deep to be signed")
    if isinstance(value, Mapping):
        cleaned = {key: item for key, raw in value.items()
                   if (item := _clean(raw, depth + 1)) is not None}
        return cleaned or None
    if isinstance(value, list):
        items = [item for raw in value if (item := _clean(raw, depth + 1)) is not None]
        return items or None
    if value == "" and isinstance(value, str):
        return None
    return value


def canonical_card(card: Mapping[str, Any]) -> bytes:
    """The bytes a card's signature covers (see the module text)."""
    body = {key: value for key, value in card.items() if key != "signatures"}
    return json.dumps(_clean(body) or {}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False).encode("utf-8")


def card_signature(card: Mapping[str, Any], sign: Callable[[bytes], bytes],
                   kid: str) -> dict[str, str]:
    """The ``signatures`` entry of ``card``, signed by ``sign`` (Ed25519)."""
    header = json.dumps({"alg": ALGORITHM, "typ": "JOSE", "kid": kid},
                        separators=(",", ":")).encode("utf-8")
    protected = _b64(header)
    signing_input = f"{protected}.{_b64(canonical_card(card))}".encode("ascii")
    return {"protected": protected, "signature": _b64(sign(signing_input))}


def signature_valid(card: Mapping[str, Any], signature: Mapping[str, Any],
                    public_key: bytes) -> bool:
    """Whether ``signature`` is an EdDSA signature of ``card`` under ``public_key``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    protected, value = signature.get("protected"), signature.get("signature")
    if not isinstance(protected, str) or not isinstance(value, str):
        return False
    try:
        header = json.loads(_unb64(protected))
        if not isinstance(header, dict) or header.get("alg") != ALGORITHM:
            return False
        signing_input = f"{protected}.{_b64(canonical_card(card))}".encode("ascii")
        Ed25519PublicKey.from_public_bytes(public_key).verify(_unb64(value), signing_input)
    except (InvalidSignature, ValueError, UnicodeDecodeError):
        return False
    return True


def key_id(public_key: bytes) -> str:
    """A standalone signing key's ``kid``: the base64url SHA-256 of its public key."""
    return _b64(hashlib.sha256(public_key).digest())
