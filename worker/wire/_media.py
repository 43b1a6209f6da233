"""Native media inside tool content: which JSON objects pydantic-ai reads as media, and their full dump."""

from __future__ import annotations

import binascii
import hashlib
from typing import Any

__all__ = ["URL_KINDS", "binary_size", "full_media", "is_media", "normalize_content"]

URL_KINDS = frozenset({"image-url", "audio-url", "video-url", "document-url"})


def binary_size(data: Any) -> int | None:
    """Decoded length of strict base64 text, or None when it is not base64."""
    if not isinstance(data, str):
        return None
    try:
        return len(binascii.a2b_base64(data.encode("ascii"), strict_mode=True))
    except (binascii.Error, UnicodeEncodeError):
        return None


def _optional_fields_ok(value: dict[str, Any]) -> bool:
    vendor, identifier = value.get("vendor_metadata"), value.get("identifier")
    return (vendor is None or isinstance(vendor, dict)) and (identifier is None or isinstance(identifier, str))


def is_media(value: Any) -> bool:
    """True when pydantic-ai's tool-content union validates this JSON object as native media."""
    if not isinstance(value, dict) or not _optional_fields_ok(value):
        return False
    kind = value.get("kind")
    if not isinstance(kind, str):
        return False
    if kind in URL_KINDS:
        mime = value.get("media_type")
        return (
            isinstance(value.get("url"), str) and isinstance(mime, str) and bool(mime)
            and isinstance(value.get("force_download", False), bool)
        )
    if kind == "binary":
        return isinstance(value.get("media_type"), str) and binary_size(value.get("data")) is not None
    if kind == "uploaded-file":
        return (
            isinstance(value.get("file_id"), str) and isinstance(value.get("provider_name"), str)
            and isinstance(value.get("media_type", "application/octet-stream"), str)
        )
    return False


def _identifier(value: dict[str, Any], source: bytes) -> str:
    given = value.get("identifier")
    return given if given else hashlib.sha1(source, usedforsecurity=False).hexdigest()[:6]


def full_media(value: dict[str, Any]) -> dict[str, Any]:
    """The pydantic-ai dump of a media object (`is_media(value)` holds): every field, in order."""
    kind = value["kind"]
    vendor = value.get("vendor_metadata")
    if kind == "binary":
        data = binascii.a2b_base64(value["data"].encode("ascii"), strict_mode=True)
        return {"data": value["data"], "media_type": value["media_type"], "vendor_metadata": vendor,
                "kind": kind, "identifier": _identifier(value, data)}
    if kind == "uploaded-file":
        return {"file_id": value["file_id"], "provider_name": value["provider_name"], "vendor_metadata": vendor,
                "kind": kind, "media_type": value.get("media_type", "application/octet-stream"),
                "identifier": _identifier(value, value["file_id"].encode())}
    return {"url": value["url"], "force_download": value.get("force_download", False), "vendor_metadata": vendor,
            "kind": kind, "media_type": value["media_type"], "identifier": _identifier(value, value["url"].encode())}


def normalize_content(value: Any) -> Any:
    """Tool content with every media object (at any depth) in its full dump form; shared when unchanged."""
    if isinstance(value, dict):
        if is_media(value):
            return full_media(value)
        out = {key: normalize_content(item) for key, item in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, list):
        items = [normalize_content(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value
