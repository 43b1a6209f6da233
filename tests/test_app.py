"""The `run` command line: one flag per setting, flags over environment, bad settings refused with exit 2."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from worker.app import build_parser, main_run, settings_from_args
from worker.settings import GapPolicy, Settings

SHAPED = {"processor": "my_hooks.redact:processor"}  # strings a validator holds to a form


def _other_value(name: str) -> tuple[list[str], object]:
    """Command-line arguments that set `name` to a valid value other than its default, and that value."""
    info = Settings.model_fields[name]
    schema = Settings.model_json_schema()["properties"][name]
    schema = next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)
    if "$ref" in schema:
        schema = Settings.model_json_schema()["$defs"][schema["$ref"].split("/")[-1]]
    flag, default = "--" + name.replace("_", "-"), info.default
    if info.annotation is bool:
        return ([f"--no-{flag[2:]}"] if default else [flag]), not default
    if "enum" in schema:
        [value, *_] = [v for v in schema["enum"] if v != default]
        return [flag, value], value
    if schema.get("type") == "integer":
        value = default + 1 if default + 1 <= schema.get("maximum", default + 1) else default - 1
        return [flag, str(value)], value
    value = SHAPED.get(name, f"set-{name}")
    return [flag, value], value


@pytest.mark.parametrize("name", sorted(Settings.model_fields))
def test_every_setting_has_a_flag_that_sets_it(name: str) -> None:
    argv, expected = _other_value(name)
    value = getattr(settings_from_args(build_parser().parse_args(argv)), name)
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    assert value == expected
    assert value != Settings.model_fields[name].default


def test_flags_override_environment_which_overrides_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_SOURCE_TOPIC", "from-env")
    monkeypatch.setenv("WORKER_GROUP_ID", "env-group")
    args = build_parser().parse_args(
        ["--group-id", "flag-group", "--gap-policy", "halt", "--commit-interval-ms", "250"]
    )
    s = settings_from_args(args)
    assert s.source_topic == "from-env"
    assert s.group_id == "flag-group"
    assert s.gap_policy is GapPolicy.HALT
    assert s.commit_interval_ms == 250
    assert s.dlq_topic == Settings.model_fields["dlq_topic"].default


def test_boolean_flags_take_a_negative_form() -> None:
    s = settings_from_args(build_parser().parse_args(["--no-ssl-check-hostname"]))
    assert s.ssl_check_hostname is False


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--source-topic", "same", "--output-topic", "same"], "must differ"),
        (["--commit-interval-ms", "0"], "commit_interval_ms"),
        (["--security-protocol", "SASL_SSL"], "sasl_mechanism"),
        (["--gap-policy", "ignore"], "gap_policy"),
        (["--heartbeat-interval-ms", "20000"], "heartbeat_interval_ms"),
        (["--session-timeout-ms", "60000"], "session_timeout_ms (60000) must be below transaction_timeout_ms (60000)"),
        (["--commit-interval-ms", "5000", "--transaction-timeout-ms", "5000", "--session-timeout-ms", "4000"],
         "commit_interval_ms (5000) must be below transaction_timeout_ms (5000)"),
        (["--processor", "no_colon"], "processor: Value error, must be written module:attribute"),
        (["--processor", "tests.processors:missing"], "processor 'tests.processors:missing': tests.processors has "
                                                      "no attribute missing"),
        (["--processor", "tests.no_such_module:p"], "cannot be imported: ModuleNotFoundError"),
    ],
)
def test_bad_settings_exit_2_naming_the_setting(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_run(argv) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert err.count("\n") == 1, "one line"


def test_secrets_are_not_echoed_in_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_run(["--security-protocol", "SASL_SSL", "--sasl-password", "hunter2-secret"]) == 2
    assert "hunter2-secret" not in capsys.readouterr().err


def test_a_stop_requested_while_the_worker_loads_ends_it_cleanly() -> None:
    """SIGTERM soon after the process starts, before the conversion core and the Kafka client have loaded, is held
    and honoured once the worker runs: exit 0 and its last words, not death by the signal."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "worker", "run", "--bootstrap-servers", "127.0.0.1:1", "--source-topic", "s",
         "--output-topic", "o", "--dlq-topic", "d", "--metrics-port", "0", "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    time.sleep(0.3)  # the interpreter is up; `import worker.app` and the core take longer than this
    worker.send_signal(signal.SIGTERM)
    out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out.decode(errors="replace")[-2000:]
    assert b"worker stopped cleanly" in out.splitlines()[-1]
