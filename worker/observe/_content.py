"""Tool-result projection: execution values become text or payload-free AG-UI content parts (spec §1b.4)."""

from __future__ import annotations

import binascii
from typing import Any

from ag_ui.core import AudioPart, DocumentPart, FileSource, ImagePart, TextPart, UrlSource, VideoPart

from worker.observe._json import sorted_json

__all__ = ["execution_value", "media_description", "public_value", "tool_result_content"]

_URL_KINDS = frozenset({"image-url", "audio-url", "video-url", "document-url"})
_CONTENT_KEY = "a13n.tool-content"


def execution_value(content: Any, metadata: dict[str, Any] | None) -> Any:
    """The tool's own result: `content[result_index]` when the Harness marked one, else the content."""
    if metadata is not None and _CONTENT_KEY in metadata:
        return content[metadata[_CONTENT_KEY]["result_index"]]
    return content


def _binary_size(data: Any) -> int | None:
    if not isinstance(data, str):
        return None
    try:
        return len(binascii.a2b_base64(data.encode("ascii"), strict_mode=True))
    except (binascii.Error, UnicodeEncodeError):
        return None


def media_description(value: Any) -> dict[str, Any] | None:
    """The payload-free description of a JSON object that pydantic-ai reads as native media, else None."""
    if not isinstance(value, dict):
        return None
    kind = value.get("kind")
    if kind in _URL_KINDS:
        url, mime = value.get("url"), value.get("media_type")
        if not isinstance(url, str) or not isinstance(mime, str) or not mime:
            return None
        out: dict[str, Any] = {"kind": kind}
        if url.startswith(("https://", "http://")):
            out["url"] = url
        else:
            out["payload_omitted"] = True
        out["media_type"] = mime
        return out
    if kind == "binary":
        mime, size = value.get("media_type"), _binary_size(value.get("data"))
        if not isinstance(mime, str) or size is None:
            return None
        return {"kind": "binary", "media_type": mime, "size_bytes": size, "payload_omitted": True}
    if kind == "uploaded-file":
        file_id, provider = value.get("file_id"), value.get("provider_name")
        mime = value.get("media_type", "application/octet-stream")
        if not isinstance(file_id, str) or not isinstance(provider, str) or not isinstance(mime, str):
            return None
        return {"kind": kind, "file_id": file_id, "provider_name": provider, "media_type": mime}
    return None


def public_value(value: Any) -> Any:
    """`value` with native media, at any depth of dicts and lists, replaced by its description."""
    if isinstance(value, dict):
        described = media_description(value)
        if described is not None:
            return described
        return {key: public_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [public_value(item) for item in value]
    return value


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return sorted_json(public_value(value))


def _part(description: dict[str, Any]) -> Any:
    mime = description.get("media_type")
    mime = mime if isinstance(mime, str) else None
    url, file_id = description.get("url"), description.get("file_id")
    source: UrlSource | FileSource
    if isinstance(url, str):
        source = UrlSource(value=url, mime_type=mime)
    elif isinstance(file_id, str):
        provider = description.get("provider_name")
        source = FileSource(value=file_id, provider=provider if isinstance(provider, str) else None, mime_type=mime)
    else:
        return TextPart(text=_text(description))
    kind, mime_text = description.get("kind"), mime or ""
    if kind == "image-url" or mime_text.startswith("image/"):
        return ImagePart(source=source)
    if kind == "audio-url" or mime_text.startswith("audio/"):
        return AudioPart(source=source)
    if kind == "video-url" or mime_text.startswith("video/"):
        return VideoPart(source=source)
    return DocumentPart(source=source)


def tool_result_content(value: Any) -> str | list[Any]:
    """Text for ordinary results; ordered AG-UI content parts when any item is native media."""
    items = value if isinstance(value, list) else [value]
    descriptions = [media_description(item) for item in items]
    if all(d is None for d in descriptions):
        return _text(value)
    parts: list[Any] = []
    for item, described in zip(items, descriptions, strict=True):
        parts.append(TextPart(text=_text(item)) if described is None else _part(described))
    return parts
