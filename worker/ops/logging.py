"""Log setup: JSON lines for machines, short text for terminals, and secrets never written in either."""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal, TextIO

import orjson
from pydantic import SecretBytes, SecretStr

from worker.errors import ConfigError

__all__ = ["REDACTED", "JsonFormatter", "RedactingFilter", "RepeatFilter", "TextFormatter", "configure_logging"]

REDACTED: Final = "***"
_SECRET_WORD: Final = r"(?:password|passwd|secret|token|api[_-]?key|credentials?|private[_-]?key)"
_SECRET_KEY: Final = re.compile(rf"{_SECRET_WORD}", re.IGNORECASE)
_SECRET_IN_TEXT: Final = re.compile(
    rf"(?P<key>[\w.-]*{_SECRET_WORD}[\w.-]*)(?P<q>['\"]?)(?P<sep>\s*[=:]\s*)"
    r"(?P<val>'[^']*'|\"[^\"]*\"|[^\s,;&)}\]]+)",
    re.IGNORECASE,
)
_STANDARD_ATTRS: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName",
}  # fmt: skip
_HANDLER_MARK: Final = "_worker_ops_handler"


def _redact_text(text: str) -> str:
    return _SECRET_IN_TEXT.sub(lambda m: f"{m['key']}{m['q']}{m['sep']}{REDACTED}", text)


def _redact_value(key: str | None, value: Any) -> Any:
    if isinstance(value, SecretStr | SecretBytes) or (key is not None and _SECRET_KEY.search(key)):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: _redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(None, v) for v in value]
    if isinstance(value, str):
        return _redact_text(value)
    return value


class RedactingFilter(logging.Filter):
    """Rewrites a record so that no secret-named field, `SecretStr`, or `key=value` secret survives in it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            args = record.args
            if isinstance(args, Mapping):
                record.args = {k: _redact_value(str(k), v) for k, v in args.items()}
            else:
                record.args = tuple(REDACTED if isinstance(a, SecretStr | SecretBytes) else a for a in args)
        record.msg = _redact_text(record.getMessage())
        record.args = None
        for key in [k for k in vars(record) if k not in _STANDARD_ATTRS]:
            setattr(record, key, _redact_value(key, getattr(record, key)))
        return True


class RepeatFilter(logging.Filter):
    """Lets one record of `prefix` loggers per (logger, level, message template) through every `window_s`; the
    next one that passes says how many it withheld. A broker that is down makes the client repeat itself."""

    def __init__(self, prefix: str, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._prefix = prefix
        self._window = window_s
        self._clock = clock
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self._prefix):
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self._window:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = (now, 0)
        if last is not None and last[1]:
            record.repeated = last[1]
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the record's extras, and exc when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _extras(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = _redact_text(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = record.stack_info
        return orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class TextFormatter(logging.Formatter):
    """`ts LEVEL logger: msg key=value ...` for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extras:
            line = f"{line}  {extras}"
        if record.exc_info:
            line = f"{line}\n{_redact_text(self.formatException(record.exc_info))}"
        return line


def _level(level: str) -> int:
    value = logging.getLevelName(level.strip().upper())
    if not isinstance(value, int):
        raise ConfigError(f"log_level must be a logging level name such as INFO or DEBUG, got {level!r}")
    return value


def configure_logging(
    format: Literal["auto", "json", "text"] = "auto", level: str = "INFO", stream: TextIO | None = None
) -> None:
    """Send the root logger's records to `stream` (stderr) as JSON lines, or as text when `auto` sees a terminal."""
    if format not in ("auto", "json", "text"):
        raise ConfigError(f"log_format must be auto, json or text, got {format!r}")
    out = stream if stream is not None else sys.stderr
    if format == "auto":
        format = "text" if out.isatty() else "json"
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter() if format == "json" else TextFormatter())
    handler.addFilter(RepeatFilter("aiokafka"))  # before redaction: it keys on the message template
    handler.addFilter(RedactingFilter())
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(_level(level))
    # aiokafka logs every coordinator look-up of every transaction at INFO; keep its warnings and errors,
    # at most one of each kind per 10 s.
    logging.getLogger("aiokafka").setLevel(max(_level(level), logging.WARNING))
