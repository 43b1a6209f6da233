"""The command line every command shares: `python -m worker`'s commands, one flag per field of a settings model (a
flag beats its `WORKER_*` variable; a secret gets none), the settings read from them, and the tools' quiet client
logs."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from worker.errors import ConfigError

if TYPE_CHECKING:
    from worker.client import ConnectionSettings

__all__ = ["command_parser", "is_secret", "quiet_client_logs", "readable_settings", "settings_from_args",
           "settings_parser"]  # fmt: skip

_S = TypeVar("_S", bound=BaseSettings)
_C = TypeVar("_C", bound="ConnectionSettings")


def command_parser() -> argparse.ArgumentParser:
    """The top-level parser of `python -m worker`, with one subparser per command."""
    from worker._version import package_version  # noqa: PLC0415 - not on `run`'s path before stops are recorded

    parser = argparse.ArgumentParser(prog="python -m worker", allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"harness-agui-worker {package_version()}",
                        help="print the version and exit")  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("convert", help="convert Harness wire JSONL to AG-UI JSONL", allow_abbrev=False)
    convert.add_argument("--observer", choices=("stream", "plain"), default="stream",
                         help="`stream` (default, what the worker publishes): a root run with its inline child "
                         "runs; `plain`: each run on its own, children's items not forwarded")  # fmt: skip
    convert.add_argument("--display", action="store_true",
                         help="write display-fold records and a last {\"snapshot\": ...} line instead of events")
    convert.add_argument("--out-dir", default=None, metavar="DIR",
                         help="write DIR/<file name> for each input file instead of standard output")
    convert.add_argument("files", nargs="*", metavar="FILE",
                         help="files of Harness wire items, one JSON object per line; none: standard input")
    # The other commands are dispatched before parsing (worker/__main__.py); registered here for --help only.
    commands.add_parser("run", help="run the Kafka worker (see `python -m worker run --help`)", add_help=False)
    commands.add_parser("check", help="check that the cluster is ready for `run`'s settings (see `python -m worker "
                        "check --help`)", add_help=False)
    commands.add_parser("inspect", help="show what a group holds, or where one run stands (see `python -m worker "
                        "inspect --help`)", add_help=False)
    commands.add_parser("index", help="write the thread index from the output topic, for runs published before it "
                        "was on (see `python -m worker index --help`)", add_help=False)
    commands.add_parser("gateway", help="serve runs over HTTP/SSE (see `python -m worker gateway --help`)",
                        add_help=False)
    return parser


def is_secret(info: FieldInfo) -> bool:
    """Whether a settings field holds a secret: it is read from the environment only, never from a flag."""
    return info.annotation in (SecretStr, SecretStr | None)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def settings_parser(model: type[BaseSettings], parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` with one flag per field of `model` (`--source-topic` for `source_topic`); a flag beats
    `WORKER_SOURCE_TOPIC`. A secret (a SecretStr field) gets no flag: a command line is visible to anyone who can
    list processes."""
    # No abbreviations: `--sasl-password <secret>` must be refused, not taken for `--sasl-password-file`.
    parser.allow_abbrev = False
    prefix = str(model.model_config.get("env_prefix", ""))
    for name, info in model.model_fields.items():
        if is_secret(info):
            continue
        default = info.default.value if hasattr(info.default, "value") else info.default
        help_text = f"{info.description} [env {prefix}{name.upper()}; default {default!r}]"
        if info.annotation is bool:
            parser.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
        else:
            parser.add_argument(_flag(name), dest=name, default=None, metavar=name.upper(), help=help_text)
    return parser


def settings_from_args(args: argparse.Namespace, model: type[_S]) -> _S:
    """Flags given on the command line override the environment, which overrides the defaults."""
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if k in model.model_fields and v is not None}
    try:
        return model(**given)
    except ValidationError as exc:
        # Inputs are left out: a rejected value may be a password.
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors(include_input=False)
        )
        raise ConfigError(f"invalid settings: {problems}") from None


def readable_settings(args: argparse.Namespace, model: type[_C], command: str) -> _C | None:
    """The settings from the parsed flags and the environment, their files readable; None after one line naming
    what to fix (`worker <command>: ...`)."""
    try:
        settings = settings_from_args(args, model)
        settings.check_files()
    except ConfigError as exc:
        print(f"worker {command}: {exc}", file=sys.stderr)
        return None
    return settings


def quiet_client_logs() -> None:
    """Warnings and errors reach standard error, but none of the Kafka client's own: what they say is in the answer
    (a refused handshake's cause is read from them, so they are still made)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(lambda record: not record.name.startswith("aiokafka"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
