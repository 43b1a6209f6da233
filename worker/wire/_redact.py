"""Redaction of extension payloads: authority-bearing keys and bearer tokens never leave decoding."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

__all__ = ["is_sensitive_key", "redact"]

_BEARER = re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/=-]+")
_SEGMENTS = frozenset(
    {"authorization", "credential", "credentials", "grant", "grants", "password", "passwd", "secret", "token"}
)
_REDACTED = "[REDACTED]"


def is_sensitive_key(key: str, value: Any) -> bool:
    """A key is sensitive when a `_` segment names an authority or it contains `api_key`."""
    if key == "credential_configured" and isinstance(value, bool):
        return False
    return _sensitive_name(key)


@lru_cache(maxsize=4096)
def _sensitive_name(key: str) -> bool:
    normalized = key.lower().replace("-", "_").replace(".", "_")
    return "api_key" in normalized or not _SEGMENTS.isdisjoint(normalized.split("_"))


def redact(value: Any) -> Any:
    """Return `value` with sensitive members and bearer tokens replaced; unchanged parts are shared."""
    if isinstance(value, str):
        return _BEARER.sub("Bearer [REDACTED]", value) if "bearer" in value.lower() else value
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, dict):
        return {
            key: _REDACTED if is_sensitive_key(key, item) else redact(item) for key, item in value.items()
        }
    return value
