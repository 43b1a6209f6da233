"""`python -m worker <command>`: `convert` (offline files), `run` (the Kafka worker), `check` (is the cluster ready
for it), `inspect` (what a group holds), `index` (the thread index written from the output topic), `gateway`
(AG-UI over HTTP); `--version`."""

from __future__ import annotations

import argparse
import sys

from worker._signals import record_stop_requests

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per command."""
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
    # `run` is dispatched to worker.app.main_run before parsing; registered here for --help only.
    commands.add_parser("run", help="run the Kafka worker (see `python -m worker run --help`)", add_help=False)
    # `check` likewise, dispatched to worker.app.main_check.
    commands.add_parser("check", help="check that the cluster is ready for `run`'s settings (see `python -m worker "
                        "check --help`)", add_help=False)
    # `inspect` likewise, dispatched to worker.app.main_inspect.
    commands.add_parser("inspect", help="show what a group holds, or where one run stands (see `python -m worker "
                        "inspect --help`)", add_help=False)
    # `index` likewise, dispatched to worker.app.main_index.
    commands.add_parser("index", help="write the thread index from the output topic, for runs published before it "
                        "was on (see `python -m worker index --help`)", add_help=False)
    # `gateway` likewise, dispatched to worker.gateway.server.main_gateway.
    commands.add_parser("gateway", help="serve runs over HTTP/SSE (see `python -m worker gateway --help`)",
                        add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command; returns the exit status."""
    args_list = sys.argv[1:] if argv is None else argv
    if args_list and args_list[0] == "run":
        early = record_stop_requests()
        from worker.app import main_run  # noqa: PLC0415 - the Kafka stack loads only for `run`

        return main_run(args_list[1:], early=early)
    if args_list and args_list[0] == "check":
        from worker.app import main_check  # noqa: PLC0415

        return main_check(args_list[1:])
    if args_list and args_list[0] == "inspect":
        from worker.app import main_inspect  # noqa: PLC0415

        return main_inspect(args_list[1:])
    if args_list and args_list[0] == "index":
        from worker.app import main_index  # noqa: PLC0415

        return main_index(args_list[1:])
    if args_list and args_list[0] == "gateway":
        from worker.gateway.server import main_gateway  # noqa: PLC0415 - the server stack loads only for `gateway`

        return main_gateway(args_list[1:])
    args = build_parser().parse_args(args_list)
    from worker.convert import convert_paths  # noqa: PLC0415

    return convert_paths(args.files, observer=args.observer, display=args.display, out_dir=args.out_dir)


if __name__ == "__main__":
    sys.exit(main())
