"""The offset-commit metadata string that carries `replay_from` (host contract §6)."""

from __future__ import annotations

import orjson

__all__ = ["decode_replay_metadata", "encode_replay_metadata"]

_VERSION = 1


def encode_replay_metadata(replay_from: int) -> str:
    """Return the compact JSON `{"v":1,"replay_from":R}` stored with an offset commit."""
    if isinstance(replay_from, bool) or not isinstance(replay_from, int) or replay_from < 0:
        raise ValueError(f"replay_from must be an int >= 0, got {replay_from!r}")
    return orjson.dumps({"v": _VERSION, "replay_from": replay_from}).decode()


def decode_replay_metadata(text: str | None) -> int | None:
    """Return the `replay_from` of commit metadata, or None when it is missing, foreign or malformed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        data = orjson.loads(text)
    except ValueError:  # orjson.JSONDecodeError, and unencodable text such as lone surrogates
        return None
    if not isinstance(data, dict) or type(data.get("v")) is not int or data["v"] != _VERSION:
        return None
    value = data.get("replay_from")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value
