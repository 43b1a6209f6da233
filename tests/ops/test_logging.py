"""JSON and text log lines, level handling, and redaction of secrets."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from worker.errors import ConfigError
from worker.ops.logging import REDACTED, RepeatFilter, configure_logging


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


def _lines(buf: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_json_lines_carry_fields_and_extras() -> None:
    buf = io.StringIO()
    configure_logging("json", "INFO", stream=buf)
    logging.getLogger("worker.live.x").info(
        "rebuilt %d records", 42, extra={"topic": "src", "partition": 3, "run_id": "run-1", "offset": 99}
    )
    [entry] = _lines(buf)
    assert entry["level"] == "INFO" and entry["logger"] == "worker.live.x"
    assert entry["msg"] == "rebuilt 42 records"
    assert (entry["topic"], entry["partition"], entry["run_id"], entry["offset"]) == ("src", 3, "run-1", 99)
    assert isinstance(entry["ts"], str) and entry["ts"].endswith("Z") and "T" in entry["ts"]


def test_auto_is_json_off_a_terminal_and_text_on_one() -> None:
    plain = io.StringIO()
    configure_logging("auto", "INFO", stream=plain)
    logging.getLogger("a").info("hi")
    assert json.loads(plain.getvalue())["msg"] == "hi"
    tty = Tty()
    configure_logging("auto", "INFO", stream=tty)
    logging.getLogger("a").info("hi", extra={"partition": 2})
    line = tty.getvalue().strip()
    assert not line.startswith("{") and " INFO " in line and "a: hi" in line and "partition=2" in line
    assert len(plain.getvalue().splitlines()) == 1  # the json handler was replaced, not kept


def test_reconfiguring_replaces_our_handler_and_sets_level() -> None:
    buf = io.StringIO()
    configure_logging("json", "INFO", stream=io.StringIO())
    configure_logging("text", "warning", stream=buf)
    logging.getLogger("b").info("quiet")
    logging.getLogger("b").warning("loud")
    assert buf.getvalue().count("\n") == 1 and "loud" in buf.getvalue()
    with pytest.raises(ConfigError, match="'LOUDEST'"):
        configure_logging("json", "LOUDEST")
    with pytest.raises(ConfigError, match="'yaml'"):
        configure_logging("yaml", "INFO")  # type: ignore[arg-type]


def test_exceptions_are_logged_in_one_json_line() -> None:
    buf = io.StringIO()
    configure_logging("json", "INFO", stream=buf)
    try:
        raise ValueError("bad offset 7")
    except ValueError:
        logging.getLogger("c").exception("failed")
    [entry] = _lines(buf)
    assert "ValueError: bad offset 7" in str(entry["exc"])


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_secrets_never_reach_the_output(fmt: str) -> None:
    buf = io.StringIO()
    configure_logging(fmt, "DEBUG", stream=buf)  # type: ignore[arg-type]
    log = logging.getLogger("d")
    log.info("sasl_password=%s ssl_password: 'hunter3' token=abc.def", "hunter2")
    log.info("settings %s", {"sasl_password": "hunter4", "user": "bob"})
    log.info("secret obj %s", SecretStr("hunter5"))
    log.info("key set", extra={"api_key": "hunter7"})
    log.info("nested", extra={"config": {"client_secret": "hunter8", "nested": [{"password": "hunter9"}]},
                              "pw": SecretStr("hunter10")})
    out = buf.getvalue()
    for n in (2, 3, 4, 5, 7, 8, 9, 10):
        assert f"hunter{n}" not in out, (n, out)
    assert REDACTED in out and "bob" in out


def test_mapping_args_are_redacted_by_key() -> None:
    buf = io.StringIO()
    configure_logging("json", "INFO", stream=buf)
    logging.getLogger("e").info("user %(user)s pass %(password)s", {"user": "bob", "password": "hunter2"})
    [entry] = _lines(buf)
    assert entry["msg"] == f"user bob pass {REDACTED}"


def test_repeated_client_lines_are_held_back_and_counted() -> None:
    now = [0.0]
    flt = RepeatFilter("aiokafka", window_s=10.0, clock=lambda: now[0])

    def record(name: str, msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)

    passed = [flt.filter(record("aiokafka.conn", "Unable connect to node with id %s", 1)) for _ in range(100)]
    assert passed.count(True) == 1
    assert all(flt.filter(record("worker.live", "partition halted")) for _ in range(3)), "only client lines"
    assert flt.filter(record("aiokafka.conn", "another template")), "each template has its own window"
    now[0] = 10.5
    later = record("aiokafka.conn", "Unable connect to node with id %s", 1)
    assert flt.filter(later)
    assert later.repeated == 99
