"""Stable item ids: the first 128 bits of a SHA-256 of the run, the kind and the source id, in hex."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from importlib import import_module
from typing import Any

__all__ = ["hashed_id", "item_id"]


def _sha256() -> Callable[[bytes], Any]:
    """The interpreter's own SHA-256 (`_sha2` from 3.12, `_sha256` before), which hashes a short text in about
    half the time of OpenSSL's behind `hashlib`; `hashlib.sha256` where it is missing. Both give the same digest."""
    for name in ("_sha2", "_sha256"):
        try:
            found: Callable[[bytes], Any] = import_module(name).sha256
        except (ImportError, AttributeError):
            continue
        return found
    return hashlib.sha256


_SHA256: Callable[[bytes], Any] = _sha256()


def item_id(run_id: str, kind: str, source_id: str) -> str:
    """Stable id of an item: the same run, kind and source id always name the same item, across attempts."""
    return hashed_id(f"{run_id}\0{kind}\0{source_id}")


def hashed_id(text: str) -> str:
    """The item id of `text`, the run, kind and source id joined as `item_id` joins them."""
    digest: str = _SHA256(text.encode()).hexdigest()
    return "itm_" + digest[:32]
