"""The keys access tokens are checked with, by `kid`: the gateway's HMAC keys from files, and the identity
provider's public keys from its JWKS URL. Each set is re-read once older than its maximum age, and when a token
names a kid it lacks, at most once per minimum interval whatever the number of such tokens; a failed re-read keeps
the keys read before."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import NamedTuple

import aiohttp
import orjson
from jwt import PyJWK, PyJWKSet, PyJWTError

from worker.errors import ConfigError, GatewayError

__all__ = ["MIN_KEY_BYTES", "HmacKeys", "JwksKeys", "Key", "check_keys", "read_key"]

MIN_KEY_BYTES = 32
JWKS_ALGORITHMS = ("RS256", "ES256")
"""What a key of the identity provider may verify; its other keys (encryption, symmetric) are left out."""
_MAX_JWKS_BYTES = 1024 * 1024
_FETCH_TIMEOUT_S = 10.0

_log = logging.getLogger(__name__)


def read_key(path: str) -> bytes:
    """The key in file `path` (a trailing newline is not part of it); ConfigError when unreadable or short."""
    try:
        key = Path(path).read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise ConfigError(f"key file {path!r} cannot be read: {exc.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"key file {path!r} holds {len(key)} bytes; a key needs at least {MIN_KEY_BYTES}")
    return key


class Key(NamedTuple):
    """A key and the one algorithm it verifies (`HS256` for an HMAC key; a JWK's own for the provider's)."""

    material: bytes | PyJWK
    algorithm: str


class _KeySet:
    """Keys by kid, re-read by `_read` when older than `max_age_s` or when a kid is missing, never more often
    than every `min_refresh_s`; one re-read at a time serves every token waiting for it, and a waiting request
    that goes away does not cut it short."""

    def __init__(self, max_age_s: float, min_refresh_s: float) -> None:
        self._max_age_s = max_age_s
        self._min_refresh_s = min_refresh_s
        self._keys: dict[str | None, Key] | None = None
        self._read_at = -float("inf")
        self._tried_at = -float("inf")
        self._reading: asyncio.Task[None] | None = None

    async def get(self, kid: str | None) -> Key | None:
        """The key named `kid` (None: the key for tokens that name none), re-reading the set when due."""
        reading = self._reading
        if reading is None and self._due(kid):
            reading = self._reading = asyncio.create_task(self._refresh())
        if reading is not None:
            await asyncio.shield(reading)
        return None if self._keys is None else self._keys.get(kid)

    @property
    def loaded(self) -> bool:
        """Whether a read ever succeeded."""
        return self._keys is not None

    def _due(self, kid: str | None) -> bool:
        now = time.monotonic()
        if now - self._tried_at < self._min_refresh_s:
            return False
        return self._keys is None or now - self._read_at >= self._max_age_s or kid not in self._keys

    async def _refresh(self) -> None:
        self._tried_at = time.monotonic()
        try:
            keys = await self._read()
        except (OSError, ValueError, aiohttp.ClientError, TimeoutError, PyJWTError, ConfigError) as exc:
            _log.warning("%s: %s; the keys read before stay in use", self._what(), str(exc) or type(exc).__name__)
            return
        finally:
            self._reading = None
        if self._keys is None or set(keys) != set(self._keys):
            _log.info("%s: keys %s", self._what(), ", ".join(sorted(str(k) for k in keys if k is not None)))
        self._keys, self._read_at = keys, time.monotonic()

    async def _read(self) -> dict[str | None, Key]:
        raise NotImplementedError

    def _what(self) -> str:
        raise NotImplementedError


class HmacKeys(_KeySet):
    """The gateway's HMAC keys: `key_file`'s for tokens naming no kid or its file name, and each file of
    `key_dir` (names starting with a dot left out, as a mounted Kubernetes Secret has) under its file name."""

    def __init__(self, key_file: str | None, key_dir: str | None, max_age_s: float, min_refresh_s: float) -> None:
        super().__init__(max_age_s, min_refresh_s)
        self._file = key_file
        self._dir = key_dir
        first = self._read_files()  # unreadable or short keys stop the gateway at start
        self._keys, self._read_at = first, time.monotonic()

    def kids(self) -> list[str | None]:
        """The names of the keys as last read (None: the key for tokens that name none)."""
        return [] if self._keys is None else list(self._keys)

    @property
    def default(self) -> bytes | None:
        """The key of `key_file` as last read, for tokens that name no kid."""
        key = None if self._keys is None else self._keys.get(None)
        return key.material if key is not None and isinstance(key.material, bytes) else None

    async def _read(self) -> dict[str | None, Key]:
        return await asyncio.to_thread(self._read_files)

    def _read_files(self) -> dict[str | None, Key]:
        keys: dict[str | None, Key] = {}
        if self._dir is not None:
            try:
                names = sorted(os.listdir(self._dir))
            except OSError as exc:
                raise ConfigError(f"auth_keys_dir {self._dir!r} cannot be listed: {exc.strerror}") from None
            for name in names:
                path = os.path.join(self._dir, name)
                if not name.startswith(".") and os.path.isfile(path):
                    keys[name] = Key(read_key(path), "HS256")
            if not keys and self._file is None:
                raise ConfigError(f"auth_keys_dir {self._dir!r} holds no key file")
        if self._file is not None:
            key = Key(read_key(self._file), "HS256")
            keys[None] = keys[os.path.basename(self._file)] = key
        return keys

    def _what(self) -> str:
        return " and ".join(f"{name} {path!r}" for name, path in (("auth_key_file", self._file),
                                                                   ("auth_keys_dir", self._dir)) if path)  # fmt: skip


class JwksKeys(_KeySet):
    """The identity provider's signing keys with a kid, fetched from its JWKS `url`; nothing is fetched before
    the first token that needs them."""

    def __init__(self, url: str, max_age_s: float, min_refresh_s: float) -> None:
        super().__init__(max_age_s, min_refresh_s)
        self._url = url
        self._session: aiohttp.ClientSession | None = None

    async def get(self, kid: str | None) -> Key | None:
        if kid is None:
            return None  # the provider's tokens name their key
        key = await super().get(kid)
        if key is None and not self.loaded:
            raise GatewayError(503, "keys-unavailable", f"the identity provider's keys could not be fetched from "
                                                        f"{self._url}: retry later")  # fmt: skip
        return key

    async def _read(self) -> dict[str | None, Key]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=_FETCH_TIMEOUT_S))
        async with self._session.get(self._url, headers={"Accept": "application/json"}) as response:
            if response.status != 200:
                raise ValueError(f"answered HTTP {response.status}")
            body = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                body += chunk
                if len(body) > _MAX_JWKS_BYTES:
                    raise ValueError(f"the key set is over {_MAX_JWKS_BYTES} bytes")
        document = orjson.loads(body)
        if not isinstance(document, dict):
            raise ValueError("the answer is not a JSON key set")
        keys: dict[str | None, Key] = {}
        for jwk in PyJWKSet.from_dict(document):
            if jwk.key_id and jwk.public_key_use in (None, "sig") and jwk.algorithm_name in JWKS_ALGORITHMS:
                keys[jwk.key_id] = Key(jwk, jwk.algorithm_name)
        if not keys:
            raise ValueError(f"the key set holds no {' or '.join(JWKS_ALGORITHMS)} signing key with a kid")
        return keys

    def _what(self) -> str:
        return f"auth_jwks_url {self._url}"

    async def read_now(self) -> dict[str, Key]:
        """The provider's signing keys by kid, fetched now; the fetch's error when it fails."""
        return {kid: key for kid, key in (await self._read()).items() if kid is not None}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def check_keys(key_file: str | None, key_dir: str | None, jwks_url: str | None) -> list[tuple[str, bool, str]]:
    """One row per key source the settings name, for `worker gateway check`: (what, whether its keys could be
    read, the kids found or what to fix)."""
    rows: list[tuple[str, bool, str]] = []
    if key_file or key_dir:
        what = " and ".join(name for name, path in (("auth_key_file", key_file), ("auth_keys_dir", key_dir)) if path)
        try:
            names = sorted(str(kid) for kid in HmacKeys(key_file, key_dir, 1, 0).kids() if kid is not None)
            rows.append((f"{what}: HMAC keys", True, f"kids {', '.join(names)}"))
        except ConfigError as exc:
            rows.append((f"{what}: HMAC keys", False, str(exc)))
    if jwks_url:
        jwks = JwksKeys(jwks_url, 1, 0)
        try:
            found = await jwks.read_now()
            rows.append(("auth_jwks_url: signing keys", True, ", ".join(f"{kid} ({key.algorithm})"
                                                                         for kid, key in sorted(found.items()))))
        except (OSError, ValueError, aiohttp.ClientError, TimeoutError, PyJWTError) as exc:
            rows.append(("auth_jwks_url: signing keys", False, f"{jwks_url}: {str(exc) or type(exc).__name__}: check "
                         "the URL, and that the gateway reaches the identity provider"))  # fmt: skip
        finally:
            await jwks.close()
    return rows
