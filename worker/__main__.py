"""`python -m worker <command>`: `convert` (offline files), `run` (the Kafka worker), `check` (is the cluster ready
for it), `inspect` (what a group holds), `index` (the thread index written from the output topic), `gateway`
(AG-UI over HTTP); `--version`."""

from __future__ import annotations

import sys

from worker._signals import record_stop_requests

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command; returns the exit status."""
    args_list = sys.argv[1:] if argv is None else argv
    if args_list and args_list[0] == "run":
        early = record_stop_requests()
        from worker.app import main_run  # noqa: PLC0415 - the Kafka stack loads only for `run`

        return main_run(args_list[1:], early=early)
    if args_list and args_list[0] == "check":
        from worker.tools.check import main_check  # noqa: PLC0415

        return main_check(args_list[1:])
    if args_list and args_list[0] == "inspect":
        from worker.tools.inspect import main_inspect  # noqa: PLC0415

        return main_inspect(args_list[1:])
    if args_list and args_list[0] == "index":
        from worker.tools.index import main_index  # noqa: PLC0415

        return main_index(args_list[1:])
    if args_list and args_list[0] == "gateway":
        from worker.gateway.server import main_gateway  # noqa: PLC0415 - the server stack loads only for `gateway`

        return main_gateway(args_list[1:])
    from worker.cli import command_parser  # noqa: PLC0415

    args = command_parser().parse_args(args_list)
    from worker.convert import convert_paths  # noqa: PLC0415

    return convert_paths(args.files, observer=args.observer, display=args.display, out_dir=args.out_dir)


if __name__ == "__main__":
    sys.exit(main())
