"""OAUTHBEARER for the Kafka client: access tokens from an OIDC token endpoint by the client-credentials grant
(RFC 6749 §4.4), one token shared by every connection of the process and fetched again before it expires."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Final

from aiokafka.abc import AbstractTokenProvider

from worker.errors import TokenError

__all__ = ["ClientCredentialsTokens"]

_USER_AGENT: Final = "harness-agui-worker"
_UNKNOWN_LIFETIME_S: Final = 60.0  # a token that states no lifetime (no expires_in, no exp claim) is kept this long
_MIN_EARLY_S: Final = 5.0  # a token is replaced at least this long before it expires
_MAX_ANSWER_BYTES: Final = 1 << 20


class ClientCredentialsTokens(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka is untyped
    """The current access token for `client_id`, cached until a fifth of its lifetime (at least 5 s) is left.

    The secret is read through `secret()` at every request, so a rotated file is used by the next one; concurrent
    connections wait for one request. A refusal or a timeout raises TokenError, which names the endpoint, the
    client id and the provider's error code, never the secret or a token.
    """

    def __init__(
        self, endpoint: str, client_id: str, secret: Callable[[], str | None], *, scope: str | None = None,
        timeout_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self._endpoint = endpoint
        self._client_id = client_id
        self._secret = secret
        self._scope = scope
        self._timeout_s = timeout_s
        self._clock = clock
        self._token: str | None = None
        self._renew_at = 0.0
        self._lock: asyncio.Lock | None = None

    async def token(self) -> str:
        """An access token with more than its early-renewal margin left."""
        if self._token is not None and self._clock() < self._renew_at:
            return self._token
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._token is None or self._clock() >= self._renew_at:
                asked = self._clock()
                token, lifetime = await asyncio.to_thread(self._request)
                self._token = token
                self._renew_at = asked + lifetime - max(_MIN_EARLY_S, lifetime / 5)
            return self._token

    def _request(self) -> tuple[str, float]:
        """POST the grant; the token and its lifetime in seconds."""
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        pair = f"{urllib.parse.quote_plus(self._client_id)}:{urllib.parse.quote_plus(self._secret() or '')}"
        request = urllib.request.Request(
            self._endpoint, data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Authorization": "Basic " + base64.b64encode(pair.encode()).decode(),
                     "Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json",
                     "User-Agent": _USER_AGENT},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                body = response.read(_MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as exc:
            code = _error_code(exc.read(_MAX_ANSWER_BYTES))
            cause = "authentication" if exc.code in (400, 401, 403) else "unreachable"
            raise TokenError(
                f"refused client {self._client_id!r} with HTTP {exc.code}{f' ({code})' if code else ''}",
                endpoint=self._endpoint, cause=cause,
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            what = f"no answer within {self._timeout_s:g} s" if isinstance(reason, TimeoutError) else str(reason)
            raise TokenError(f"unreachable: {what}", endpoint=self._endpoint, cause="unreachable") from None
        return self._read(body)

    def _read(self, body: bytes) -> tuple[str, float]:
        try:
            answer = json.loads(body)
            token = answer["access_token"]
        except (ValueError, KeyError, TypeError):
            raise TokenError("answered without an access_token", endpoint=self._endpoint,
                             cause="unreachable") from None  # fmt: skip
        if not isinstance(token, str) or not token:
            raise TokenError("answered with an empty access_token", endpoint=self._endpoint, cause="unreachable")
        lifetime = answer.get("expires_in")
        if isinstance(lifetime, int | float) and not isinstance(lifetime, bool) and lifetime > 0:
            return token, float(lifetime)
        return token, _lifetime_of(token)


def _error_code(body: bytes) -> str:
    """The OAuth `error` code of a refusal (RFC 6749 §5.2), if the body carries one."""
    try:
        answer: Any = json.loads(body)
    except ValueError:
        return ""
    code = answer.get("error") if isinstance(answer, dict) else None
    return code if isinstance(code, str) and code.isascii() and len(code) <= 64 else ""


def _lifetime_of(token: str) -> float:
    """Seconds until a JWT's `exp` claim (read, not verified: the brokers verify it); a default when absent."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return max(0.0, float(claims["exp"]) - time.time())
    except (IndexError, ValueError, KeyError, TypeError):
        return _UNKNOWN_LIFETIME_S
