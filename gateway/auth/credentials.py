"""The credential kinds a door accepts, each yielding a :class:`gateway.caller.Credential`.

- the session's **operator** token (random 32 bytes, compared in constant time);
- **declared bearer** tokens, read from the environment variables a manifest names;
- **declared JWT issuers**, verified with pyjwt against keys from a JWKS or PEM file;
  each subject (``sub``) of an issuer is a task owner of its own;
- **formation** tokens (``member:<from>``; verification lives in :mod:`gateway.auth.tokens`).

No object here ever puts a token into its ``repr``, an exception or a log line.
Configuration mistakes raise :class:`CredentialError`, whose text names the field, the
environment variable or the file at fault, and what would be accepted.

pyjwt and cryptography's key and certificate modules are imported by the functions that
use them: only a door with a declared JWT issuer needs them, and their import is a
measurable part of a member's start (every formation member starts one interpreter).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from gateway.auth.tokens import PREFIX, InvalidToken
from gateway.caller import (
    DECLARABLE_SCOPES,
    FORMATION_SCOPES,
    OPERATOR_METHODS,
    TASK_METHODS,
    Credential,
)
from gateway.errors import GatewayError

__all__ = [
    "JWT_ALGORITHMS",
    "MAX_JWT_SUBJECT_CHARS",
    "OPERATOR_CREDENTIAL",
    "CredentialError",
    "DeclaredBearer",
    "JwtIssuer",
    "JwtKey",
    "OperatorToken",
    "member_credential",
]

#: What a bearer token may be made of (RFC 6750 ``b64token``); anything else could not be
#: sent as exactly ``Authorization: Bearer <token>``.
_TOKEN68_RE = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")
#: A declared credential's name, as it appears after ``bearer:`` or ``jwt:``.
_CREDENTIAL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_FORMATION_TOKEN_START = PREFIX + "."
_OPERATOR_TOKEN_BYTES = 32
_MIN_OPERATOR_TOKEN_CHARS = 16
#: Seconds of clock skew a JWT's exp / nbf / iat is granted.
JWT_LEEWAY_SECONDS = 60
#: Longest ``sub`` a JWT may carry (OpenID Connect's bound); it becomes part of the owner
#: of every task the token starts, so it is kept with each of them.
MAX_JWT_SUBJECT_CHARS = 255
#: Asymmetric JWS algorithms a declared issuer may allow. ``none`` and the HMAC family are
#: never accepted: a shared secret belongs in a declared bearer token, not a JWT issuer.
JWT_ALGORITHMS: frozenset[str] = frozenset(
    {"EdDSA", "ES256", "ES256K", "ES384", "ES512",
     "RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
)
_RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_ALGORITHMS = {"secp256r1": "ES256", "secp256k1": "ES256K", "secp384r1": "ES384",
                  "secp521r1": "ES512"}


class CredentialError(GatewayError, ValueError):
    """A credential is configured wrongly. The text names what and how to fix it."""


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or _CREDENTIAL_NAME_RE.fullmatch(name) is None:
        raise CredentialError(
            f"{kind} name {name!r} is not accepted: use 1-64 letters, digits, '_', '.' or "
            "'-', starting with a letter or digit"
        )
    return name


def _check_scopes(kind_name: str, scopes: Iterable[str] | None) -> frozenset[str]:
    """Declared scopes; ``None`` (the manifest gives none) means every task method."""
    if scopes is None:
        return TASK_METHODS
    if isinstance(scopes, str):
        raise CredentialError(f"{kind_name}: scopes must be a list of method names")
    chosen = frozenset(scopes)
    unknown = sorted(repr(s) for s in chosen if s not in DECLARABLE_SCOPES)
    if unknown:
        raise CredentialError(
            f"{kind_name}: unknown scope {', '.join(unknown)}; accepted: "
            f"{', '.join(sorted(DECLARABLE_SCOPES))}"
        )
    if not chosen:
        raise CredentialError(
            f"{kind_name}: scopes is empty; name at least one method, or leave scopes out "
            "for every task method"
        )
    return chosen


def _token_fault(token: object) -> str | None:
    """Why ``token`` cannot be a declared or operator token (never quoting it), or None."""
    if not isinstance(token, str) or not token:
        return "is empty"
    if _TOKEN68_RE.fullmatch(token) is None:
        return ("holds characters a 'Bearer' header cannot carry (whitespace, quotes or "
                "non-ASCII); use letters, digits and -._~+/")
    if token.startswith(_FORMATION_TOKEN_START):
        return "starts with 'mft1.', which is reserved for formation tokens"
    return None


# -- operator ----------------------------------------------------------------------------


class OperatorToken:
    """The session's operator token: every method, every task. Compared in constant time."""

    __slots__ = ("_encoded", "_value")

    def __init__(self, value: str) -> None:
        fault = _token_fault(value)
        if fault is None and len(value) < _MIN_OPERATOR_TOKEN_CHARS:
            fault = f"is shorter than {_MIN_OPERATOR_TOKEN_CHARS} characters"
        if fault is not None:
            raise CredentialError(f"the operator token {fault}")
        self._value = value
        self._encoded = value.encode("ascii")

    @classmethod
    def generate(cls) -> OperatorToken:
        """A new random token: 32 bytes from the OS, as unpadded base64url (43 characters)."""
        return cls(secrets.token_urlsafe(_OPERATOR_TOKEN_BYTES))

    @property
    def value(self) -> str:
        """The token text, for ``operator.token`` and for the operator's own client."""
        return self._value

    @property
    def credential(self) -> Credential:
        return OPERATOR_CREDENTIAL

    def matches(self, presented: str) -> bool:
        """Whether ``presented`` is this token (constant time in the token's content)."""
        return hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), self._encoded)

    def __repr__(self) -> str:
        return "OperatorToken(<hidden>)"


OPERATOR_CREDENTIAL = Credential(kind="operator", name="operator", scopes=OPERATOR_METHODS)


# -- declared bearer ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeclaredBearer:
    """A bearer token a manifest declares (``network.authentication.bearer``)."""

    name: str
    token: str = field(repr=False)
    scopes: frozenset[str] = TASK_METHODS
    _encoded: bytes = field(init=False, repr=False, compare=False)
    credential: Credential = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_name("bearer", self.name)
        fault = _token_fault(self.token)
        if fault is not None:
            raise CredentialError(f"the token of bearer {self.name!r} {fault}")
        scopes = _check_scopes(f"bearer {self.name!r}", self.scopes)
        object.__setattr__(self, "scopes", scopes)
        object.__setattr__(self, "_encoded", self.token.encode("ascii"))
        object.__setattr__(
            self, "credential", Credential(kind="bearer", name=f"bearer:{self.name}",
                                           scopes=scopes),
        )

    @classmethod
    def from_env(
        cls, name: str, env_var: str, scopes: Iterable[str] | None,
        environ: Mapping[str, str],
    ) -> DeclaredBearer:
        """The bearer ``name`` whose token is in ``environ[env_var]``.

        Raises :class:`CredentialError` naming the variable (never its value) when it is
        missing, empty or not a usable token.
        """
        _check_name("bearer", name)
        value = environ.get(env_var)
        if not value:
            state = "is not set" if value is None else "is empty"
            raise CredentialError(
                f"bearer {name!r} reads its token from the environment variable {env_var}, "
                f"which {state}: export {env_var} with the token before starting the door"
            )
        fault = _token_fault(value)
        if fault is not None:
            raise CredentialError(
                f"the environment variable {env_var} (token of bearer {name!r}) {fault}"
            )
        return cls(name=name, token=value, scopes=_check_scopes(f"bearer {name!r}", scopes))

    def matches(self, presented: str) -> bool:
        """Whether ``presented`` is this token (constant time in the token's content)."""
        return hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), self._encoded)


# -- declared JWT issuer -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JwtKey:
    """One verification key of an issuer and the algorithms that key may be used with."""

    key: Any
    algorithms: frozenset[str]
    kid: str | None = None


def _key_algorithms(key: Any) -> frozenset[str]:
    """The JWS algorithms a public key's type can verify (the key pins the algorithm)."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, rsa.RSAPublicKey):
        return _RSA_ALGORITHMS
    if isinstance(key, ec.EllipticCurvePublicKey):
        alg = _EC_ALGORITHMS.get(key.curve.name)
        return frozenset({alg}) if alg else frozenset()
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return frozenset({"EdDSA"})
    return frozenset()


def _jwk_to_key(jwk: object, where: str) -> JwtKey:
    import jwt

    if not isinstance(jwk, dict):
        raise CredentialError(f"{where} is not a JSON object")
    kty = jwk.get("kty")
    if "d" in jwk or kty == "oct":
        raise CredentialError(
            f"{where} is a private or symmetric key: give the issuer's public keys only"
        )
    try:
        key = jwt.PyJWK(jwk).key
    except (jwt.PyJWTError, ValueError, TypeError):
        # pyjwt's message can quote the whole key: name only its type.
        raise CredentialError(
            f"{where} (kty={kty!r}, crv={jwk.get('crv')!r}) is not a usable public key"
        ) from None
    algorithms = _key_algorithms(key)
    alg = jwk.get("alg")
    if isinstance(alg, str):
        algorithms &= {alg}
    kid = jwk.get("kid")
    return JwtKey(key=key, algorithms=algorithms, kid=kid if isinstance(kid, str) else None)


class JwtIssuer:
    """A JWT issuer a manifest declares (``network.authentication.jwt``).

    A token is accepted when, in this order: its header's ``alg`` is on the issuer's
    allow-list, a key of the issuer (chosen by ``kid`` when the token names one) verifies
    its signature with an algorithm that key's type supports, and pyjwt validates ``iss``,
    ``aud`` and a required ``exp`` (plus ``nbf``/``iat`` when present), with 60 s leeway.
    The token's own scope claims are not read: the manifest's ``scopes`` rule.

    The door takes a token with :meth:`authenticate`, which also requires a ``sub`` of
    1 to 255 characters: each subject is its own task owner (``jwt:<name>/<sub>``), while
    ``credential`` (``jwt:<name>``, owner the same) is what traces and scope errors name.
    """

    __slots__ = ("_algorithms", "_audience", "_issuer", "_keys", "credential", "name")

    def __init__(
        self, name: str, issuer: str, audience: str | Sequence[str],
        algorithms: Iterable[str], keys: Iterable[JwtKey],
        scopes: Iterable[str] | None = None,
    ) -> None:
        self.name = _check_name("jwt", name)
        where = f"jwt {name!r}"
        if not isinstance(issuer, str) or not issuer:
            raise CredentialError(f"{where}: issuer must be a non-empty string")
        audiences = [audience] if isinstance(audience, str) else list(audience)
        if not audiences or not all(isinstance(a, str) and a for a in audiences):
            raise CredentialError(f"{where}: audience must be a non-empty string or list")
        allowed = frozenset(algorithms) if not isinstance(algorithms, str) else frozenset()
        refused = sorted(a for a in allowed if a not in JWT_ALGORITHMS)
        if not allowed or refused:
            raise CredentialError(
                f"{where}: algorithms {refused or '[]'} not accepted; list one or more of "
                f"{', '.join(sorted(JWT_ALGORITHMS))} (never none or HS*)"
            )
        usable = tuple(
            JwtKey(key=k.key, algorithms=k.algorithms & allowed, kid=k.kid) for k in keys
        )
        usable = tuple(k for k in usable if k.algorithms)
        if not usable:
            raise CredentialError(
                f"{where}: no key can verify any of the algorithms {sorted(allowed)}; "
                "check the key file and the algorithms list"
            )
        self._issuer = issuer
        self._audience = audiences
        self._algorithms = allowed
        self._keys = usable
        self.credential = Credential(
            kind="jwt", name=f"jwt:{name}", scopes=_check_scopes(where, scopes)
        )

    @classmethod
    def from_jwks(
        cls, name: str, issuer: str, audience: str | Sequence[str],
        algorithms: Iterable[str], jwks: Mapping[str, Any],
        scopes: Iterable[str] | None = None, *, source: str = "the JWKS",
    ) -> JwtIssuer:
        """An issuer whose keys are the ``keys`` of a JWKS document."""
        keys = jwks.get("keys") if isinstance(jwks, Mapping) else None
        if not isinstance(keys, list) or not keys:
            raise CredentialError(f"jwt {name!r}: {source} has no 'keys' list")
        loaded = [_jwk_to_key(k, f"jwt {name!r}: key #{i} of {source}")
                  for i, k in enumerate(keys)]
        return cls(name, issuer, audience, algorithms, loaded, scopes)

    @classmethod
    def from_jwks_file(
        cls, name: str, issuer: str, audience: str | Sequence[str],
        algorithms: Iterable[str], path: str | Path, scopes: Iterable[str] | None = None,
    ) -> JwtIssuer:
        """An issuer whose keys are in the JWKS file at ``path``."""
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise CredentialError(
                f"jwt {name!r}: cannot read jwks_file {str(path)!r} ({exc.strerror})"
            ) from None
        except ValueError:
            raise CredentialError(
                f"jwt {name!r}: jwks_file {str(path)!r} is not JSON (a JWKS document "
                "is {\"keys\": [...]})"
            ) from None
        return cls.from_jwks(name, issuer, audience, algorithms, document, scopes,
                             source=f"jwks_file {str(path)!r}")

    @classmethod
    def from_pem_file(
        cls, name: str, issuer: str, audience: str | Sequence[str],
        algorithms: Iterable[str], path: str | Path, scopes: Iterable[str] | None = None,
    ) -> JwtIssuer:
        """An issuer with one public key (or certificate) in the PEM file at ``path``."""
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import load_pem_public_key

        where = f"jwt {name!r}: pem_file {str(path)!r}"
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise CredentialError(f"{where} cannot be read ({exc.strerror})") from None
        if b"PRIVATE KEY" in data:
            raise CredentialError(f"{where} holds a private key: give the public key only")
        try:
            if b"BEGIN CERTIFICATE" in data:
                key: Any = x509.load_pem_x509_certificate(data).public_key()
            else:
                key = load_pem_public_key(data)
        except ValueError:
            raise CredentialError(
                f"{where} is not a PEM public key or certificate"
            ) from None
        return cls(name, issuer, audience, algorithms,
                   [JwtKey(key=key, algorithms=_key_algorithms(key))], scopes)

    def verify(self, token: str) -> dict[str, Any]:
        """The claims of ``token``, or :class:`gateway.auth.tokens.InvalidToken`."""
        import jwt

        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken(f"jwt {self.name}: not a JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise InvalidToken(f"jwt {self.name}: algorithm not allowed")
        keys = [k for k in self._keys if alg in k.algorithms and (kid is None or k.kid == kid)]
        for key in keys:
            try:
                return jwt.decode(
                    token, key.key, algorithms=sorted(key.algorithms),
                    audience=self._audience, issuer=self._issuer,
                    leeway=JWT_LEEWAY_SECONDS,
                    options={"require": ["exp", "iss", "aud"]},
                )
            except jwt.InvalidSignatureError:
                continue
            except jwt.PyJWTError as exc:
                # The class names the rule (expired, audience...); the text may quote claims.
                raise InvalidToken(f"jwt {self.name}: {type(exc).__name__}") from None
        raise InvalidToken(f"jwt {self.name}: no key verifies the signature")

    def authenticate(self, token: str) -> Credential:
        """The credential of ``token``'s subject, or :class:`gateway.auth.tokens.InvalidToken`.

        A token without a ``sub`` string of 1 to :data:`MAX_JWT_SUBJECT_CHARS` characters
        is refused: every subject of one issuer would otherwise own the same tasks.
        """
        subject = self.verify(token).get("sub")
        if not isinstance(subject, str) or not 0 < len(subject) <= MAX_JWT_SUBJECT_CHARS:
            raise InvalidToken(f"jwt {self.name}: no usable sub claim")
        credential = self.credential
        # The name cannot hold "/", so "jwt:<name>/" is a fixed prefix: owners of two
        # subjects (or of two issuers) never coincide.
        return Credential(kind="jwt", name=credential.name, scopes=credential.scopes,
                          owner=f"{credential.name}/{subject}")

    def accepts(self, token: str) -> bool:
        """Whether the door would take ``token`` (:meth:`authenticate`)."""
        try:
            self.authenticate(token)
        except InvalidToken:
            return False
        return True

    def __repr__(self) -> str:
        return f"JwtIssuer(name={self.name!r}, issuer={self._issuer!r})"


# -- formation ---------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def member_credential(member: str) -> Credential:
    """The credential of a verified formation token from ``member``: exactly five scopes."""
    return Credential(kind="member", name=f"member:{member}", scopes=FORMATION_SCOPES,
                      member=member)
