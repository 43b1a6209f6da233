"""Access tokens, minted by the application backend that knows who may see a thread, checked by the gateway: JWTs
granting one run (claim `run_id`) or every run of one thread (claim `thread_id`), signed HS256 with one of the
gateway's keys or RS256/ES256 by the identity provider; and, until 0.5.0, the gateway's own v1 tokens.

A v1 token is `v1.<scope>.<subject>.<expiry>.<signature>`: scope `run` or `thread`, the subject base64url-encoded,
the expiry in Unix seconds, the HMAC-SHA256 signature base64url over everything before it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from typing import Any, Literal, NamedTuple

import jwt

from worker.errors import ConfigError, GatewayError
from worker.gateway.keys import HmacKeys, JwksKeys, Key
from worker.gateway.settings import GatewaySettings

__all__ = ["Grant", "TokenCheck", "mint_jwt", "mint_token"]

Scope = Literal["run", "thread"]
_ALGORITHMS = ("HS256", "RS256", "ES256")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())


def _check_grant(scope: str, ttl_s: int) -> None:
    if scope not in ("run", "thread"):
        raise ConfigError(f"a token's scope is run or thread, got {scope!r}")
    if ttl_s <= 0:
        raise ConfigError(f"a token's lifetime must be positive, got {ttl_s}")


def mint_jwt(
    key: bytes, scope: Scope, subject: str, ttl_s: int, *, kid: str | None = None, audience: str | None = None,
    issuer: str | None = None,
) -> str:  # fmt: skip
    """An HS256 JWT granting the run (scope `run`) or every run of the thread (scope `thread`) `subject` for
    `ttl_s`, signed with `key`, named `kid` when given, for the gateway's `audience` and `issuer` when given."""
    _check_grant(scope, ttl_s)
    now = int(time.time())
    claims: dict[str, Any] = {f"{scope}_id": subject, "iat": now, "exp": now + ttl_s}
    claims.update({name: value for name, value in (("aud", audience), ("iss", issuer)) if value})
    return jwt.encode(claims, key, algorithm="HS256", headers={"kid": kid} if kid else None)


def mint_token(key: bytes, scope: Scope, subject: str, ttl_s: int, *, now: float | None = None) -> str:
    """A v1 token granting the run (scope `run`) or every run of the thread (scope `thread`) `subject` for
    `ttl_s`; accepted until 0.5.0: mint JWTs instead."""
    _check_grant(scope, ttl_s)
    expiry = int((time.time() if now is None else now) + ttl_s)
    body = f"v1.{scope}.{_b64(subject.encode())}.{expiry}"
    return f"{body}.{_sign(key, body)}"


class Grant(NamedTuple):
    """What a valid token grants: one run (`run`) or every run of one thread (`thread`)."""

    scope: str
    subject: str

    def allows(self, run_id: str, thread_id: str | None) -> bool:
        return self.subject == (run_id if self.scope == "run" else thread_id)


def _refused(code: str, message: str) -> GatewayError:
    return GatewayError(401, code, message)


def _verify_v1(key: bytes | None, token: str) -> Grant:
    parts = token.split(".")
    if len(parts) != 5 or parts[1] not in ("run", "thread"):
        raise _refused("bad-token", "the access token is malformed: expected a JWT or v1.<run|thread>.<subject>."
                                    "<expiry>.<signature>")  # fmt: skip
    if key is None:
        raise _refused("bad-token", "this gateway has no auth_key_file to check v1 tokens with: send a JWT")
    if not hmac.compare_digest(parts[4], _sign(key, ".".join(parts[:4]))):
        raise _refused("bad-token", "the access token's signature does not match this gateway's key")
    if not (parts[3].isascii() and parts[3].isdigit()) or int(parts[3]) <= time.time():
        raise _refused("expired-token", "the access token has expired: ask the application for a new one")
    try:
        subject = _unb64(parts[2]).decode()
    except (ValueError, UnicodeDecodeError):
        raise _refused("bad-token", "the access token's subject is not base64url text") from None
    return Grant(parts[1], subject)


def _claims_refusal(exc: jwt.InvalidTokenError) -> GatewayError:
    """The answer to a JWT whose signature or claims PyJWT refused."""
    if isinstance(exc, jwt.ExpiredSignatureError):
        return _refused("expired-token", "the access token has expired (exp): ask the application for a new one")
    if isinstance(exc, jwt.ImmatureSignatureError):
        return _refused("premature-token", f"the access token is not valid yet ({exc}): check the clocks of the "
                                           "gateway and of the application that minted it")  # fmt: skip
    claim = exc.claim if isinstance(exc, jwt.MissingRequiredClaimError) else None
    if isinstance(exc, jwt.InvalidAudienceError) or claim == "aud":
        return _refused("wrong-audience", "the access token is not for this gateway: its aud must name the "
                                          "gateway's auth_audience")  # fmt: skip
    if isinstance(exc, jwt.InvalidIssuerError) or claim == "iss":
        return _refused("wrong-issuer", "the access token's iss is not the gateway's auth_issuer")
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return _refused("wrong-algorithm", f"the access token's algorithm is refused: {exc}")
    if isinstance(exc, jwt.InvalidSignatureError):
        return _refused("bad-token", "the access token's signature does not match the key it names")
    return _refused("bad-token", f"the access token is not a valid JWT: {exc}")


def _grant(claims: dict[str, Any]) -> Grant:
    found = [(scope, claims[f"{scope}_id"]) for scope in ("run", "thread") if f"{scope}_id" in claims]
    if len(found) != 1 or not isinstance(found[0][1], str) or not found[0][1]:
        raise _refused("bad-token", "a JWT grants one run (claim run_id) or one thread (claim thread_id): "
                                    "exactly one, a non-empty string")  # fmt: skip
    return Grant(*found[0])


class TokenCheck:
    """Checks access tokens before a run is looked up. A JWT is verified only with a key it names (or the key of
    `auth_key_file` when it names none) and only with that key's algorithm: HS256 for the gateway's keys, the
    JWK's RS256 or ES256 for the identity provider's; `exp` is required, `aud` and `iss` checked when set."""

    def __init__(
        self, hmac_keys: HmacKeys | None, jwks: JwksKeys | None, *, audience: str | None = None,
        issuer: str | None = None, leeway_s: float = 0,
    ) -> None:  # fmt: skip
        self._hmac = hmac_keys
        self._jwks = jwks
        self._audience = audience
        self._issuer = issuer
        self._leeway_s = leeway_s

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> TokenCheck:
        """The check `settings` ask for; ConfigError when a key file cannot be read."""
        ages = (settings.auth_keys_max_age_s, settings.auth_keys_min_refresh_s)
        key_file, key_dir = settings.auth_key_file or None, settings.auth_keys_dir or None
        hmac_keys = None if key_file is None and key_dir is None else HmacKeys(key_file, key_dir, *ages)
        jwks = JwksKeys(settings.auth_jwks_url, *ages) if settings.auth_jwks_url else None
        return cls(hmac_keys, jwks, audience=settings.auth_audience or None, issuer=settings.auth_issuer or None,
                   leeway_s=settings.auth_leeway_s)  # fmt: skip

    async def verify(self, token: str) -> Grant:
        """What `token` grants; GatewayError 401 with the cause's code when it is not valid now, 503
        `keys-unavailable` when the identity provider's keys were never fetched."""
        if token.startswith("v1."):
            return _verify_v1(None if self._hmac is None else self._hmac.default, token)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise _refused("bad-token", "the access token is neither a JWT nor a v1 token") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if not isinstance(algorithm, str) or algorithm.lower() == "none":
            raise _refused("unsigned-token", "the access token is not signed (alg none): send a signed JWT")
        if algorithm not in _ALGORITHMS:
            raise _refused("wrong-algorithm", f"the access token is signed {algorithm}; the gateway accepts "
                                              f"{', '.join(_ALGORITHMS)}")  # fmt: skip
        key = await self._key(kid, algorithm)
        if key.algorithm != algorithm:
            raise _refused("wrong-algorithm", f"the access token says {algorithm}, but its key {kid!r} verifies "
                                              f"{key.algorithm} tokens only")  # fmt: skip
        try:
            claims = jwt.decode(
                token, key.material, algorithms=[key.algorithm], audience=self._audience, issuer=self._issuer,
                leeway=self._leeway_s, options={"require": ["exp"], "verify_aud": self._audience is not None,
                                                "enforce_minimum_key_length": True},
            )  # fmt: skip
        except jwt.InvalidTokenError as exc:
            raise _claims_refusal(exc) from None
        except jwt.PyJWTError as exc:  # the key itself is unfit, e.g. an RSA key under 2048 bits
            raise _refused("bad-token", f"the access token's key is refused: {exc}") from None
        return _grant(claims)

    async def _key(self, kid: object, algorithm: str) -> Key:
        if kid is not None and not isinstance(kid, str):
            raise _refused("bad-token", "the access token's kid is not a string")
        sources = (self._hmac, self._jwks) if algorithm == "HS256" else (self._jwks, self._hmac)
        for source in sources:
            if source is not None and (key := await source.get(kid)) is not None:
                return key
        if kid is None:
            raise _refused("unknown-key", "the access token names no key (kid), and the gateway has no "
                                          "auth_key_file for such tokens")  # fmt: skip
        raise _refused("unknown-key", f"the access token's key {kid!r} is none of the gateway's keys")

    async def close(self) -> None:
        """Close the connection pool of the JWKS fetches."""
        if self._jwks is not None:
            await self._jwks.close()
