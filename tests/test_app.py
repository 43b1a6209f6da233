"""The `run` command line: one flag per setting, flags over environment, bad settings refused with exit 2."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from worker._version import package_version
from worker.app import main_run, run_parser
from worker.cli import command_parser, is_secret, settings_from_args
from worker.client import ConnectionSettings
from worker.settings import Settings
from worker.stream import GapPolicy

SHAPED = {"processor": "my_hooks.redact:processor", "sasl_mechanism": "SCRAM-SHA-512",
          "oauth_token_endpoint": "https://idp.example/token"}  # strings a validator holds to a form
_SASL = ("--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN", "--sasl-username", "u",
         "--sasl-password-file", "{file}")
_OAUTH = ("--security-protocol", "SASL_SSL", "--sasl-mechanism", "OAUTHBEARER", "--oauth-token-endpoint",
          "https://idp.example/token", "--oauth-client-id", "w", "--oauth-client-secret-file", "{file}")
CONTEXT = {  # the other flags a setting needs to be valid (a SASL mechanism its credentials, TLS files TLS)
    **dict.fromkeys(["sasl_mechanism", "sasl_username", "sasl_password_file"], _SASL),
    **dict.fromkeys(["oauth_client_id", "oauth_client_secret_file", "oauth_scope", "oauth_timeout_ms",
                     "oauth_token_endpoint"], _OAUTH),
    **dict.fromkeys(["ssl_cafile", "ssl_certfile", "ssl_password_file"], ("--security-protocol", "SSL")),
    "ssl_keyfile": ("--security-protocol", "SSL", "--ssl-certfile", "{file}"),
}  # fmt: skip
FLAGGED = sorted(name for name, info in Settings.model_fields.items() if not is_secret(info))


def _other_value(name: str, file: str) -> tuple[list[str], object]:
    """Command-line arguments that set `name` to a valid value other than its default, and that value; `file` is a
    readable file for the settings that name one."""
    info = Settings.model_fields[name]
    schema = Settings.model_json_schema()["properties"][name]
    schema = next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)
    if "$ref" in schema:
        schema = Settings.model_json_schema()["$defs"][schema["$ref"].split("/")[-1]]
    flag, default = "--" + name.replace("_", "-"), info.default
    context = [arg.replace("{file}", file) for arg in CONTEXT.get(name, ())]
    if info.annotation is bool:
        return ([f"--no-{flag[2:]}"] if default else [flag]), not default
    if "enum" in schema:
        [value, *_] = [v for v in schema["enum"] if v != default]
        return [flag, value], value
    if schema.get("type") == "integer":
        value = default + 1 if default + 1 <= schema.get("maximum", default + 1) else default - 1
        return [*context, flag, str(value)], value
    value = file if name.endswith("file") else SHAPED.get(name, f"set-{name}")
    return [*context, flag, value], value


@pytest.mark.parametrize("name", FLAGGED)
def test_every_setting_but_a_secret_has_a_flag_that_sets_it(name: str, tmp_path: Path) -> None:
    argv, expected = _other_value(name, _secret_file(tmp_path))
    value = getattr(settings_from_args(run_parser().parse_args(argv), Settings), name)
    assert value == expected
    assert value != Settings.model_fields[name].default


def test_secrets_are_the_password_and_client_secret_settings() -> None:
    assert sorted(set(Settings.model_fields) - set(FLAGGED)) == ["oauth_client_secret", "sasl_password",
                                                                "ssl_password"]


def test_flags_override_environment_which_overrides_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_SOURCE_TOPIC", "from-env")
    monkeypatch.setenv("WORKER_GROUP_ID", "env-group")
    args = run_parser().parse_args(
        ["--group-id", "flag-group", "--gap-policy", "halt", "--commit-interval-ms", "250"]
    )
    s = settings_from_args(args, Settings)
    assert s.source_topic == "from-env"
    assert s.group_id == "flag-group"
    assert s.gap_policy is GapPolicy.HALT
    assert s.commit_interval_ms == 250
    assert s.dlq_topic == Settings.model_fields["dlq_topic"].default


def test_boolean_flags_take_a_negative_form() -> None:
    s = settings_from_args(run_parser().parse_args(["--no-ssl-check-hostname"]), Settings)
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


def test_secrets_are_not_echoed_in_errors(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_SASL_PASSWORD", "hunter2-secret")
    assert main_run(["--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512"]) == 2
    err = capsys.readouterr().err
    assert "needs sasl_username" in err
    assert "hunter2-secret" not in err


@pytest.mark.parametrize("flag", ["--sasl-password", "--ssl-password", "--oauth-client-secret"])
def test_no_secret_is_taken_from_the_command_line(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main_run([flag, "hunter2-secret"])
    assert exited.value.code == 2
    assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


def _secret_file(tmp_path: Path, text: str = "s3cret-from-a-file") -> str:
    path = tmp_path / "secret"
    path.write_text(text + "\n")
    return str(path)


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "GSSAPI"], {},
         "sasl_mechanism 'GSSAPI' cannot be served (Kerberos is not built into this worker)"),
        (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-1"], {},
         "sasl_mechanism 'SCRAM-SHA-1' cannot be served: use one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"),
        (["--sasl-mechanism", "PLAIN"], {}, "sasl_mechanism=PLAIN needs security_protocol SASL_SSL"),
        (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN", "--sasl-username", "u"], {},
         "needs a password: set sasl_password_file, or WORKER_SASL_PASSWORD"),
        (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN", "--sasl-username", "u",
          "--sasl-password-file", "{file}"], {"WORKER_SASL_PASSWORD": "x"}, "sasl_password is given twice"),
        (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN", "--sasl-username", "u",
          "--sasl-password-file", "/nonexistent/pw"], {}, "sasl_password_file '/nonexistent/pw' is not a readable"),
        (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "OAUTHBEARER"], {},
         "OAUTHBEARER needs oauth_token_endpoint and oauth_client_id"),
        (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "OAUTHBEARER", "--oauth-token-endpoint",
          "https://idp.example/token", "--oauth-client-id", "w"], {}, "OAUTHBEARER needs a client secret"),
        (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "OAUTHBEARER", "--oauth-token-endpoint",
          "http://idp.example/token", "--oauth-client-id", "w", "--oauth-client-secret-file", "{file}"], {},
         "must be an https URL (http only on a loopback address)"),
        (["--security-protocol", "SASL_SSL", "--sasl-mechanism", "OAUTHBEARER", "--sasl-username", "u"], {},
         "sasl_username set, but OAUTHBEARER takes the oauth_* settings"),
        (["--ssl-cafile", "{file}"], {}, "ssl_cafile set, but security_protocol=PLAINTEXT uses no TLS"),
        (["--security-protocol", "SSL", "--ssl-keyfile", "{file}"], {}, "ssl_keyfile needs ssl_certfile"),
    ],
)  # fmt: skip
def test_a_security_combination_the_worker_cannot_serve_exits_2_with_the_reason(
    argv: list[str], env: dict[str, str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    file = _secret_file(tmp_path)
    assert main_run([arg.replace("{file}", file) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert err.count("\n") == 1, "one line"
    assert "s3cret-from-a-file" not in err


def test_a_secret_is_read_from_its_file_when_a_client_is_made(tmp_path: Path) -> None:
    from worker.client import connection_options  # noqa: PLC0415

    file = _secret_file(tmp_path, "first")
    settings = ConnectionSettings(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="u",
                                  sasl_password_file=file)  # fmt: skip
    assert connection_options(settings)["sasl_plain_password"] == "first"
    Path(file).write_text("rotated\n")
    assert connection_options(settings)["sasl_plain_password"] == "rotated"
    assert "first" not in repr(settings) and "rotated" not in repr(settings)


def _catches(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler for `sig` (the SigCgt mask of /proc/<pid>/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(caught >> (sig - 1) & 1)


def _settings_loaded(pid: int) -> bool:
    """Whether process `pid` has loaded pydantic's compiled core (the settings, and the worker's stack after them)."""
    return "pydantic_core" in Path(f"/proc/{pid}/maps").read_text()


def test_a_stop_requested_while_the_worker_loads_ends_it_cleanly() -> None:
    """SIGTERM soon after the process starts, before the conversion core and the Kafka client have loaded, is held
    and honoured once the worker runs: exit 0 and its last words, not death by the signal. The signal goes as soon
    as the process catches SIGTERM, and counts only if pydantic had not loaded by then (else another try), so a
    busy host neither fails the test nor lets it pass with a handler installed late."""
    for _attempt in range(5):
        worker = subprocess.Popen(
            [sys.executable, "-m", "worker", "run", "--bootstrap-servers", "127.0.0.1:1", "--source-topic", "s",
             "--output-topic", "o", "--dlq-topic", "d", "--metrics-port", "0", "--log-format", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not _catches(worker.pid, signal.SIGTERM):
            assert worker.poll() is None and time.monotonic() < deadline, "the worker never caught SIGTERM"
            time.sleep(0.001)
        early = not _settings_loaded(worker.pid)
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0, out.decode(errors="replace")[-2000:]
        assert b"worker stopped cleanly" in out.splitlines()[-1]
        if early:
            return
    raise AssertionError("SIGTERM was first caught only once the worker had loaded, five times in five")


def test_version_prints_the_package_version() -> None:
    done = subprocess.run([sys.executable, "-m", "worker", "--version"], capture_output=True, text=True, check=False,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"harness-agui-worker {package_version()}"
    assert package_version() != "0+unknown", "the test environment installs the package"


@pytest.mark.parametrize("command", ["convert", "run"])
def test_every_flag_of_every_command_has_help(command: str) -> None:
    parser = run_parser() if command == "run" else next(action.choices[command] for action in command_parser()._actions
                                                        if isinstance(action, argparse._SubParsersAction))
    undocumented = [action.dest for action in parser._actions if not action.help]
    assert undocumented == []
