"""Access tokens: an HMAC-SHA256 over a run id or a thread id and an expiry, minted by the application backend that
knows who may see the thread, checked by the gateway with the same key.

A token is `v1.<scope>.<subject>.<expiry>.<signature>`: scope `run` or `thread`, the subject base64url-encoded,
the expiry in Unix seconds, the signature base64url over everything before it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from pathlib import Path
from typing import Literal, NamedTuple

from worker.errors import ConfigError, GatewayError

__all__ = ["MIN_KEY_BYTES", "Grant", "TokenCheck", "mint_token", "read_key"]

MIN_KEY_BYTES = 32
Scope = Literal["run", "thread"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def read_key(path: str) -> bytes:
    """The key in file `path` (a trailing newline is not part of it); ConfigError when unreadable or short."""
    try:
        key = Path(path).read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise ConfigError(f"auth_key_file {path!r} cannot be read: {exc.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"auth_key_file {path!r} holds {len(key)} bytes; a key needs at least {MIN_KEY_BYTES}")
    return key


def _sign(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())


def mint_token(key: bytes, scope: Scope, subject: str, ttl_s: int, *, now: float | None = None) -> str:
    """A token granting the run (scope `run`) or every run of the thread (scope `thread`) `subject` for `ttl_s`."""
    if scope not in ("run", "thread"):
        raise ConfigError(f"a token's scope is run or thread, got {scope!r}")
    if ttl_s <= 0:
        raise ConfigError(f"a token's lifetime must be positive, got {ttl_s}")
    expiry = int((time.time() if now is None else now) + ttl_s)
    body = f"v1.{scope}.{_b64(subject.encode())}.{expiry}"
    return f"{body}.{_sign(key, body)}"


class Grant(NamedTuple):
    """What a valid token grants: one run (`run`) or every run of one thread (`thread`)."""

    scope: str
    subject: str

    def allows(self, run_id: str, thread_id: str | None) -> bool:
        return self.subject == (run_id if self.scope == "run" else thread_id)


class TokenCheck:
    """Checks tokens signed with the gateway's key."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def verify(self, token: str, *, now: float | None = None) -> Grant:
        """What `token` grants; GatewayError 401 (`bad-token`, `expired-token`) when it is not valid now."""
        parts = token.split(".")
        if len(parts) != 5 or parts[0] != "v1" or parts[1] not in ("run", "thread"):
            raise GatewayError(401, "bad-token", "the access token is malformed: expected v1.<run|thread>.<subject>."
                                                 "<expiry>.<signature>")  # fmt: skip
        body = ".".join(parts[:4])
        if not hmac.compare_digest(parts[4], _sign(self._key, body)):
            raise GatewayError(401, "bad-token", "the access token's signature does not match this gateway's key")
        expiry = parts[3]
        if not expiry.isdigit() or int(expiry) <= (time.time() if now is None else now):
            raise GatewayError(401, "expired-token", "the access token has expired: ask the application for a new one")
        try:
            subject = _unb64(parts[2]).decode()
        except (ValueError, UnicodeDecodeError):
            raise GatewayError(401, "bad-token", "the access token's subject is not base64url text") from None
        return Grant(parts[1], subject)
