"""Tool-result projection: execution values become text or payload-free AG-UI content parts (spec §1b.4)."""

from __future__ import annotations

from typing import Any

from ag_ui.core import AudioPart, DocumentPart, FileSource, ImagePart, TextPart, UrlSource, VideoPart

from worker.observe._json import sorted_json
from worker.wire import binary_size, is_media

__all__ = ["execution_value", "media_description", "public_tool_result_content", "public_value", "tool_result_content"]

_CONTENT_KEY = "a13n.tool-content"


def execution_value(content: Any, metadata: Any) -> Any:
    """The tool's own result: `content[result_index]` when the Harness marked one, else the content."""
    if isinstance(metadata, dict) and _CONTENT_KEY in metadata:
        return content[metadata[_CONTENT_KEY]["result_index"]]
    return content


def media_description(value: Any) -> dict[str, Any] | None:
    """The payload-free description of a JSON object that pydantic-ai reads as native media, else None."""
    if not is_media(value):
        return None
    kind = value["kind"]
    if kind == "binary":
        size = binary_size(value["data"])
        return {"kind": "binary", "media_type": value["media_type"], "size_bytes": size, "payload_omitted": True}
    if kind == "uploaded-file":
        mime = value.get("media_type", "application/octet-stream")
        return {"kind": kind, "file_id": value["file_id"], "provider_name": value["provider_name"], "media_type": mime}
    url = value["url"]
    out: dict[str, Any] = {"kind": kind}
    if url.startswith(("https://", "http://")):
        out["url"] = url
    else:
        out["payload_omitted"] = True
    out["media_type"] = value["media_type"]
    return out


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


def _omitted_description(value: Any) -> bool:
    """Whether `value` is shaped as the description of media whose payload `media_description` left out."""
    if not isinstance(value, dict) or value.get("payload_omitted") is not True:
        return False
    if value.get("kind") == "binary":
        return list(value) == ["kind", "media_type", "size_bytes", "payload_omitted"]
    return list(value) == ["kind", "payload_omitted", "media_type"]


def public_tool_result_content(public: Any) -> str | list[Any]:
    """`tool_result_content(value)` computed from `public_value(value)` alone, reading every media description
    back as media; exact unless `value` holds no native media but, at its top level, an object shaped as the
    description of media without payload."""
    items = public if isinstance(public, list) else [public]
    media = [is_media(item) or _omitted_description(item) for item in items]
    if not any(media):
        return _text(public)
    parts: list[Any] = []
    for item, described in zip(items, media, strict=True):
        parts.append(_part(item) if described else TextPart(text=_text(item)))
    return parts
