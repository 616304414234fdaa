"""``mur run --capsule ... --card-signing-key FILE``: a standalone door's own card key.

A member of a formation has its card signed by the launcher with the formation key
(docs/audit.md, "Signed agent cards"). A door run alone may sign its card with a key of
its own: an Ed25519 private key in a PEM file (PKCS#8, as ``openssl genpkey -algorithm
ed25519`` writes it). :func:`read_card_key` reads it, or raises :class:`UsageError`
naming the file and what to give instead; the key's bytes never appear in a message or a
repr. Its ``kid`` is the base64url SHA-256 of its public key
(:func:`gateway.door.card_signing.key_id`).
"""

from __future__ import annotations

from pathlib import Path

from gateway.door.card_signing import key_id
from launcher.spawn.run_flags import UsageError

__all__ = ["CardKey", "read_card_key"]

#: A key file larger than this is no PEM key.
_MAX_KEY_FILE = 64 * 1024
_GENERATE = "make one with `openssl genpkey -algorithm ed25519 -out card-key.pem`"


class CardKey:
    """An Ed25519 private key that signs this door's card."""

    __slots__ = ("_private", "kid", "public_bytes")

    def __init__(self, private: object, public_bytes: bytes) -> None:
        self._private = private
        self.public_bytes = public_bytes
        self.kid = key_id(public_bytes)

    def sign(self, data: bytes) -> bytes:
        signature: bytes = self._private.sign(data)  # type: ignore[attr-defined]
        return signature

    def __repr__(self) -> str:
        return f"CardKey(kid={self.kid!r})"


def read_card_key(path: Path) -> CardKey:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_KEY_FILE + 1)
    except OSError as exc:
        raise UsageError(f"--card-signing-key {path}: cannot be read "
                         f"({exc.strerror or exc}); {_GENERATE}") from None
    try:
        key = load_pem_private_key(data, password=None) if len(data) <= _MAX_KEY_FILE \
            else None
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"--card-signing-key {path}: is not an unencrypted Ed25519 private "
                         f"key in PEM; {_GENERATE}")
    return CardKey(key, key.public_key().public_bytes_raw())
