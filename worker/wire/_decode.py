"""`decode_item`: one wire record (spec §1a) to a typed Harness item, or a DecodeError naming the field."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from worker.errors import DecodeError
from worker.wire._agent import decode_agent_event, decode_tool_call
from worker.wire._fields import get_int, get_obj, get_str, get_str_or_none, kind_of
from worker.wire._items import ExtensionEvent, HarnessEvent, HarnessItem, HarnessRunResultEvent, RunResult
from worker.wire._redact import redact

__all__ = ["EXTENSION_KINDS", "MAX_EXTENSION_PAYLOAD_BYTES", "decode_item", "parse_datetime"]

EXTENSION_KINDS = frozenset(
    {"context", "state", "recovery", "invocation", "delegation", "usage", "lifecycle", "tool", "diagnostic"}
)
MAX_EXTENSION_PAYLOAD_BYTES = 64 * 1024
_DATETIME = TypeAdapter(datetime)
# The common spelling, which `datetime.fromisoformat` reads exactly as pydantic does.
_CANONICAL_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{6})?(?:Z|[+-][0-9]{2}:[0-9]{2})\Z"
)
_STATUSES = frozenset({"completed", "suspended", "failed", "cancelled"})
_RETRY_HINTS = frozenset({"none", "new_run", "dependency_change"})
_USAGE_INTS = (
    "input_tokens", "cache_write_tokens", "cache_read_tokens", "output_tokens", "input_audio_tokens",
    "cache_audio_read_tokens", "output_audio_tokens", "requests", "tool_calls", "provider_receipts",
    "unknown_cost_records", "incomplete_requests",
)
_USAGE_FIELDS = frozenset({*_USAGE_INTS, "audio_seconds", "cost", "details", "model_usage_coverage"})
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_MUST_BE_NULL = {
    "completed": ("failure", "suspend_reason", "deferred"),
    "suspended": ("output", "failure"),
    "failed": ("output", "suspend_reason", "deferred"),
    "cancelled": ("output", "failure", "suspend_reason", "deferred"),
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


_DIGITS_ONLY = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_NUMBER = b"0" * 19  # integers of 19+ digits may leave 64 bits, where orjson silently yields floats


def _loads(value: bytes) -> Any:
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("$", f"not valid JSON: {exc}") from exc
    if _LONG_NUMBER in value.translate(_DIGITS_ONLY):
        return json.loads(value, parse_constant=_reject_constant)  # exact big integers
    return data


def parse_datetime(value: Any, path: str) -> datetime:
    """Parse a datetime the way pydantic does (ISO text, `Z`, offsets, unix numbers)."""
    return _parse_datetime(value, path)[0]


def _parse_datetime(value: Any, path: str) -> tuple[datetime, str]:
    """The datetime, and its isoformat() when it can be read off canonical text (else ""): isoformat costs 1.6 us.

    Canonical text round-trips as written except a zero fraction (dropped), `Z` and -00:00 (both +00:00).
    """
    if type(value) is str and _CANONICAL_TIME.match(value):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass  # out-of-range fields: pydantic reports them
        else:
            text: str = value
            if text[-1] == "Z":
                text = text[:-1] + "+00:00"
            if text.endswith("-00:00") or ".000000" in text:
                text = ""
            return parsed, text
    elif type(value) not in (str, int, float):
        raise DecodeError(path, f"expected a datetime string or number, got {kind_of(value)}")
    try:
        return _DATETIME.validate_python(value), ""
    except ValidationError as exc:
        raise DecodeError(path, f"invalid datetime {value!r}") from exc


def _extension(event: dict[str, Any], path: str) -> ExtensionEvent:
    extra = event.keys() - {"schema_version", "kind", "payload"}
    if extra:
        raise DecodeError(f"{path}.{min(extra)}", "unexpected field in a Harness extension event")
    version = event.get("schema_version", "1")
    if not isinstance(version, str) or not 1 <= len(version) <= 32:
        raise DecodeError(f"{path}.schema_version", f"expected a string of 1 to 32 characters, got {version!r}")
    kind = get_str(event, "kind", path)
    if kind not in EXTENSION_KINDS:
        raise DecodeError(f"{path}.kind", f"unknown extension kind {kind!r}")
    if "payload" not in event:
        raise DecodeError(f"{path}.payload", "required field is missing")
    payload = redact(event["payload"])
    try:
        size = len(orjson.dumps(payload))
    except orjson.JSONEncodeError:  # integers beyond 64 bits
        size = MAX_EXTENSION_PAYLOAD_BYTES
    if size > MAX_EXTENSION_PAYLOAD_BYTES - 4096:  # exact size uses Python's float spelling
        size = len(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode())
        if size > MAX_EXTENSION_PAYLOAD_BYTES:
            raise DecodeError(f"{path}.payload", f"payload is {size} bytes, over the 65536-byte limit")
    return ExtensionEvent(kind, payload, version)


def _usage(result: dict[str, Any], path: str) -> dict[str, Any]:
    usage = get_obj(result, "usage", path)
    path = f"{path}.usage"
    unknown = usage.keys() - _USAGE_FIELDS
    if unknown:
        raise DecodeError(f"{path}.{min(unknown)}", "unexpected field in a usage summary")
    for name in _USAGE_INTS:
        if name in usage:
            get_int(usage, name, path)
    details = usage.get("details", {})
    if not isinstance(details, dict):
        raise DecodeError(f"{path}.details", f"expected an object, got {kind_of(details)}")
    for key, count in details.items():
        if not isinstance(count, int) or isinstance(count, bool):
            raise DecodeError(f"{path}.details.{key}", f"expected an integer, got {kind_of(count)}")
    for name in ("audio_seconds", "cost"):
        amount = usage.get(name)
        if amount is None and name == "cost":
            continue
        if name in usage and not (
            type(amount) in (int, float) or (isinstance(amount, str) and _DECIMAL_TEXT.match(amount.strip()))
        ):
            raise DecodeError(f"{path}.{name}", f"expected a decimal number, got {amount!r}")
    coverage = usage.get("model_usage_coverage", "all")
    if coverage not in ("all", "responses_only"):
        raise DecodeError(f"{path}.model_usage_coverage", f"expected 'all' or 'responses_only', got {coverage!r}")
    return usage


def _failure(result: dict[str, Any], path: str) -> dict[str, Any]:
    failure = get_obj(result, "failure", path)
    path = f"{path}.failure"
    extra = failure.keys() - {"code", "message", "retry_hint", "details"}
    if extra:
        raise DecodeError(f"{path}.{min(extra)}", "unexpected field in a failure")
    code, message = get_str(failure, "code", path), get_str(failure, "message", path)
    if not code or not message:
        raise DecodeError(f"{path}.{'code' if not code else 'message'}", "must not be empty")
    hint = failure.get("retry_hint", "none")
    if not isinstance(hint, str) or hint not in _RETRY_HINTS:
        raise DecodeError(f"{path}.retry_hint", f"expected one of {sorted(_RETRY_HINTS)}, got {hint!r}")
    details = failure.get("details", {})
    if not isinstance(details, dict):
        raise DecodeError(f"{path}.details", f"expected an object, got {kind_of(details)}")
    return {"code": code, "message": message, "retry_hint": hint, "details": details}


def _result(result: dict[str, Any], path: str) -> RunResult:
    status = get_str(result, "status", path)
    if status not in _STATUSES:
        raise DecodeError(f"{path}.status", f"expected one of {sorted(_STATUSES)}, got {status!r}")
    for name in _MUST_BE_NULL[status]:
        if result.get(name) is not None:
            raise DecodeError(f"{path}.{name}", f"must be null when status is {status!r}")
    usage = _usage(result, path)
    failure = _failure(result, path) if status == "failed" else None
    deferred = None
    suspend_reason = get_str_or_none(result, "suspend_reason", path)
    if status == "suspended":
        if suspend_reason != "deferred":
            raise DecodeError(f"{path}.suspend_reason", f"must be 'deferred' when suspended, got {suspend_reason!r}")
        deferred = get_obj(result, "deferred", path)
        for group in ("calls", "approvals"):
            calls = deferred.get(group, [])
            if not isinstance(calls, list):
                raise DecodeError(f"{path}.deferred.{group}", f"expected an array, got {kind_of(calls)}")
            for i, call in enumerate(calls):
                where = f"{path}.deferred.{group}[{i}]"
                if not isinstance(call, dict):
                    raise DecodeError(where, f"expected an object, got {kind_of(call)}")
                for side in ("model_call", "target_call"):
                    call[side] = decode_tool_call(get_obj(call, side, where), f"{where}.{side}")
                get_str(call, "target_identity", where)
        metadata = deferred.get("metadata", {})
        if not isinstance(metadata, dict):
            raise DecodeError(f"{path}.deferred.metadata", f"expected an object, got {kind_of(metadata)}")
    return RunResult(status, usage, result.get("output"), failure, suspend_reason, deferred)


def _ident(obj: dict[str, Any], key: str) -> str:
    value = get_str(obj, key, "$")
    if not value.strip():
        raise DecodeError(f"$.{key}", "must not be blank")
    return value


def decode_item(value: bytes | str) -> HarnessItem:
    """Decode one wire record; anything malformed raises DecodeError(path, reason)."""
    if not isinstance(value, bytes):
        try:
            value = value.encode() if isinstance(value, str) else bytes(value)
        except UnicodeEncodeError as exc:
            raise DecodeError("$", f"not valid UTF-8 text: {exc.reason} at {exc.start}") from exc
    data = _loads(value)
    size = len(value)
    if not isinstance(data, dict):
        raise DecodeError("$", f"expected a JSON object, got {kind_of(data)}")
    thread_id, run_id, sequence = data.get("thread_id"), data.get("run_id"), data.get("sequence")
    if not (
        type(thread_id) is str and type(run_id) is str and type(sequence) is int and sequence >= 0
        and thread_id.strip() and run_id.strip()
    ):  # the detailed checks below name the first offending field
        thread_id, run_id = _ident(data, "thread_id"), _ident(data, "run_id")
        sequence = get_int(data, "sequence", "$")
        if sequence < 0:
            raise DecodeError("$.sequence", f"must be >= 0, got {sequence}")
    if "occurred_at" not in data:
        raise DecodeError("$.occurred_at", "required field is missing")
    occurred_at, iso = _parse_datetime(data["occurred_at"], "$.occurred_at")
    has_event, has_result = "event" in data, "result" in data
    if has_event == has_result:
        raise DecodeError("$", "exactly one of 'event' and 'result' must be present")
    item: HarnessItem
    if has_result:
        result = _result(get_obj(data, "result", "$"), "$.result")
        item = HarnessRunResultEvent(thread_id, run_id, sequence, occurred_at, result, wire_size=size)
    else:
        event = get_obj(data, "event", "$")
        inner = decode_agent_event(event, "$.event") if "event_kind" in event else _extension(event, "$.event")
        item = HarnessEvent(thread_id, run_id, sequence, occurred_at, inner, wire_size=size)
    item._iso = iso  # "" leaves it to isoformat() when first needed
    return item
