"""The ``mft1`` formation token: minting (launcher side) and strict verification (door side).

Format (docs/door-auth.md, "Formation tokens")::

    mft1.<payload>.<signature>

``payload`` is unpadded base64url of the UTF-8 JSON ``{"formation":…,"from":…,"to":…}``
with sorted keys and no spaces; ``signature`` is unpadded base64url of the 64-byte Ed25519
signature over the ASCII bytes ``mft1.<payload>``. Every refusal is one exception,
:class:`InvalidToken`, whose text names the failed rule and never the token.

Verification runs the cheap checks first (length, prefix, encoding, payload, formation)
so that malformed input never reaches the signature primitive, and keeps a bounded cache
of the exact strings that verified, so a member's repeated calls cost one dict lookup.
"""

from __future__ import annotations

import binascii
import importlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from gateway.errors import GatewayError
from gateway.protocol import MEMBER_NAME_PATTERN, MEMBER_NAME_RE

__all__ = [
    "FORMATION_ID_RE",
    "MAX_TOKEN_BYTES",
    "PREFIX",
    "Claims",
    "FormationKey",
    "FormationVerifier",
    "InvalidToken",
    "b64url_decode_canonical",
    "b64url_encode",
    "ed25519_backend",
    "signature_check",
]

PREFIX = "mft1"
_FORMATION_ID = r"[A-Za-z0-9_-]{1,64}"
#: A token longer than this is refused before any decoding or crypto.
MAX_TOKEN_BYTES = 512
#: What a formation id may look like in a token: ``frm_`` plus 32 hex digits in practice;
#: kept to a plain, JSON-escape-free charset so every valid payload has one encoding.
FORMATION_ID_RE = re.compile(f"^{_FORMATION_ID}$")
#: The one accepted spelling of a payload: the JSON object with exactly the keys
#: formation, from and to, sorted, no spaces, string values from charsets that JSON never
#: escapes. Any other JSON (extra, missing or repeated keys, other types, nesting, spaces,
#: escapes, another key order) does not match, so a regex is the whole strict parser.
_PAYLOAD_RE = re.compile(
    r'\{"formation":"(' + _FORMATION_ID + r')","from":"(' + MEMBER_NAME_PATTERN
    + r')","to":"(' + MEMBER_NAME_PATTERN + r')"\}'
)
_B64URL_RE = re.compile(r"[A-Za-z0-9_-]*")
_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_PADDING = (b"", b"", b"==", b"=")
#: By length mod 4, the characters a canonical text may end with: 2 and 3 leave 4 and 2
#: unused low bits that must be zero; 1 is never a valid length.
_CANONICAL_LAST = ("", "", "AQgw", "AEIMQUYcgkosw048")

#: Canonical unpadded base64url of 64 bytes: 86 characters, the last with 4 zero low bits.
_SIGNATURE_RE = re.compile(r"[A-Za-z0-9_-]{85}[AQgw]")
_PUBLIC_KEY_BYTES = 32


class InvalidToken(GatewayError):
    """A token was refused. The text names the rule that failed, never the token."""


@dataclass(frozen=True, slots=True)
class Claims:
    """What a verified formation token says: ``caller`` may call ``callee`` in ``formation``."""

    formation: str
    caller: str
    callee: str


# -- base64url ---------------------------------------------------------------------------


def b64url_encode(raw: bytes) -> str:
    """Unpadded base64url text of ``raw``."""
    return binascii.b2a_base64(raw, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode(
        "ascii"
    )


def b64url_decode_canonical(text: str) -> bytes:
    """Decode unpadded base64url, refusing every text that is not the one canonical encoding.

    Refused (``ValueError``): padding, ``+`` or ``/``, any other character, a length of
    1 mod 4 and non-zero trailing bits. This is the design's "decode, re-encode, compare",
    done without the re-encoding: a text is canonical exactly when its alphabet is right
    and its last character leaves the unused low bits zero (tests check the equivalence).
    """
    if not isinstance(text, str) or _B64URL_RE.fullmatch(text) is None:
        raise ValueError("not base64url: only A-Z a-z 0-9 - _ without padding")
    tail = len(text) % 4
    if tail and text[-1] not in _CANONICAL_LAST[tail]:
        raise ValueError("not canonical base64url: impossible length or non-zero trailing bits")
    return binascii.a2b_base64(text.encode("ascii").translate(_TO_STANDARD) + _PADDING[tail])


# -- the Ed25519 primitive ---------------------------------------------------------------

#: ``check(signature, message) -> bool`` for one public key.
SignatureCheck = Callable[[bytes, bytes], bool]


def _cryptography_check(public_key: bytes) -> SignatureCheck:
    key = Ed25519PublicKey.from_public_bytes(public_key)

    def check(signature: bytes, message: bytes) -> bool:
        try:
            key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    return check


def _pynacl_check(public_key: bytes) -> SignatureCheck:
    # Imported by name so the module works (and type-checks) without PyNaCl installed.
    bindings: Any = importlib.import_module("nacl.bindings")
    bad_signature: Any = importlib.import_module("nacl.exceptions").BadSignatureError
    sign_open = bindings.crypto_sign_open

    def check(signature: bytes, message: bytes) -> bool:
        try:
            sign_open(signature + message, public_key)
        except bad_signature:
            return False
        return True

    return check


def _pynacl_available() -> bool:
    try:
        importlib.import_module("nacl.bindings")
    except ImportError:
        return False
    return True


#: Ed25519 backends by name. libsodium (PyNaCl) verifies about twice as fast as
#: cryptography's OpenSSL binding on this project's machines (loadtests/bench_tokens.py),
#: so it is used when installed; cryptography is always there as the fallback.
_BACKENDS: dict[str, Callable[[bytes], SignatureCheck]] = {
    "pynacl": _pynacl_check,
    "cryptography": _cryptography_check,
}


def ed25519_backend() -> str:
    """The name of the Ed25519 backend verification uses: ``pynacl`` or ``cryptography``."""
    return "pynacl" if _pynacl_available() else "cryptography"


def signature_check(public_key: bytes, backend: str | None = None) -> SignatureCheck:
    """A verification function for ``public_key`` (32 raw bytes) on the named backend."""
    if not isinstance(public_key, bytes) or len(public_key) != _PUBLIC_KEY_BYTES:
        raise ValueError("an Ed25519 public key is exactly 32 raw bytes")
    # Validates the key's encoding on every backend, not only on cryptography's.
    Ed25519PublicKey.from_public_bytes(public_key)
    name = backend or ed25519_backend()
    if name not in _BACKENDS:
        raise ValueError(f"unknown Ed25519 backend {name!r}: use one of {sorted(_BACKENDS)}")
    return _BACKENDS[name](public_key)


# -- minting -----------------------------------------------------------------------------


def _canonical_payload(formation: str, caller: str, callee: str) -> bytes:
    return json.dumps(
        {"formation": formation, "from": caller, "to": callee},
        sort_keys=True, separators=(",", ":"), ensure_ascii=True,
    ).encode("ascii")


class FormationKey:
    """A formation's signing key. It lives only in the launcher's memory."""

    __slots__ = ("_private", "_public_bytes")

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._private = private_key
        self._public_bytes = private_key.public_key().public_bytes_raw()

    @classmethod
    def generate(cls) -> FormationKey:
        return cls(Ed25519PrivateKey.generate())

    @property
    def public_bytes(self) -> bytes:
        """The raw 32-byte Ed25519 public key that every door of the formation is handed."""
        return self._public_bytes

    def mint(self, *, formation: str, caller: str, callee: str) -> str:
        """Sign the token that lets ``caller`` call ``callee`` in ``formation``."""
        _require(FORMATION_ID_RE, "formation", formation)
        _require(MEMBER_NAME_RE, "caller", caller)
        _require(MEMBER_NAME_RE, "callee", callee)
        signed = f"{PREFIX}.{b64url_encode(_canonical_payload(formation, caller, callee))}"
        signature = self._private.sign(signed.encode("ascii"))
        return f"{signed}.{b64url_encode(signature)}"

    def sign(self, data: bytes) -> bytes:
        """The Ed25519 signature of ``data``: a seal of the formation's traces, a member's
        agent card (docs/audit.md). Tokens are signed by :meth:`mint` alone; what is
        signed here never starts with ``mft1.``, so it can never pass for a token."""
        if data.startswith(PREFIX.encode("ascii") + b"."):
            raise ValueError("a token is signed by mint(), never by sign()")
        return self._private.sign(data)

    def __repr__(self) -> str:
        return f"FormationKey(public={b64url_encode(self._public_bytes)})"


def _require(pattern: re.Pattern[str], field: str, value: object) -> None:
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise ValueError(f"{field} must match {pattern.pattern}, got {value!r}")


# -- verification ------------------------------------------------------------------------


def _parse_claims(payload: bytes) -> Claims:
    """The claims of a decoded payload, or InvalidToken for anything but the exact form."""
    try:
        match = _PAYLOAD_RE.fullmatch(payload.decode("ascii"))
    except UnicodeDecodeError:
        match = None
    if match is None:
        raise InvalidToken(
            "payload is not exactly {\"formation\",\"from\",\"to\"} in canonical JSON "
            "with valid names"
        )
    formation, caller, callee = match.groups()
    return Claims(formation=formation, caller=caller, callee=callee)


class FormationVerifier:
    """Verifies ``mft1`` tokens for one door.

    ``formation=None`` is a door in no formation: every ``mft1`` token is refused.
    Tokens that verified are cached by their exact string (at most ``cache_size``,
    oldest dropped first); failures are never cached.
    """

    __slots__ = ("_cache", "_cache_size", "_check", "_formation", "_lock")

    def __init__(
        self, public_key: bytes, formation: str | None, *, cache_size: int = 4096,
        backend: str | None = None,
    ) -> None:
        if formation is not None:
            _require(FORMATION_ID_RE, "formation", formation)
        if cache_size < 1:
            raise ValueError("cache_size must be at least 1")
        self._check = signature_check(public_key, backend)
        self._formation = formation
        self._cache: dict[str, Claims] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @property
    def formation(self) -> str | None:
        return self._formation

    def verify(self, token: str) -> Claims:
        """The claims of ``token``, or :class:`InvalidToken`."""
        # The hot path: a token seen before is one length check and one dict lookup.
        if not isinstance(token, str) or len(token) > MAX_TOKEN_BYTES:
            raise InvalidToken("token is not a string of at most 512 bytes")
        claims = self._cache.get(token)
        if claims is not None:
            return claims
        claims = self._verify_uncached(token)
        self._remember(token, claims)
        return claims

    def _verify_uncached(self, token: str) -> Claims:
        if self._formation is None:
            raise InvalidToken("this door is in no formation")
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != PREFIX:
            raise InvalidToken("token is not mft1.<payload>.<signature>")
        if _SIGNATURE_RE.fullmatch(parts[2]) is None:
            raise InvalidToken("signature is not 64 bytes in canonical base64url")
        try:
            payload = b64url_decode_canonical(parts[1])
        except ValueError:
            raise InvalidToken("payload is not canonical base64url") from None
        signature = binascii.a2b_base64(parts[2].encode("ascii").translate(_TO_STANDARD) + b"==")
        claims = _parse_claims(payload)
        if claims.formation != self._formation:
            raise InvalidToken("token is for another formation")
        signed = token[: len(PREFIX) + 1 + len(parts[1])].encode("ascii")
        if not self._check(signature, signed):
            raise InvalidToken("signature does not verify")
        return claims

    def _remember(self, token: str, claims: Claims) -> None:
        cache = self._cache
        if len(cache) >= self._cache_size:
            # Only eviction needs the lock (two threads must not drop the same entry);
            # a dict store is atomic on its own.
            with self._lock:
                while len(cache) >= self._cache_size:
                    cache.pop(next(iter(cache)), None)
        cache[token] = claims

    def __repr__(self) -> str:
        return f"FormationVerifier(formation={self._formation!r})"
