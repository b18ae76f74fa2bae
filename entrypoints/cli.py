"""`rlsetup` command line: parse the arguments, run one command, exit 2 on a user mistake.

    rlsetup check CONFIG [--sync]   validate a config (and, with --sync, one real weight sync)
    rlsetup envs                    list the registered environments and their knobs
    rlsetup train CONFIG            run the configured job
    rlsetup serve CONFIG            start the configured generation server and wait

A user mistake (a bad config, a missing config file, a model that is not on disk) prints one
line per problem to stderr and exits 2, never a traceback; anything else is a bug and raises.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from entrypoints import commands
from infrastructure.config_loader import ConfigError
from infrastructure.model_assets import ModelNotFound


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlsetup", description="GRPO post-training against external engines")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = sub.add_parser("check", help="validate a config file (exit 2 on problems)")
    check.add_argument("config", metavar="CONFIG")
    check.add_argument("--sync", action="store_true", help="also start the server and do one weight sync")
    check.set_defaults(run=commands.check)
    sub.add_parser("envs", help="list registered environments").set_defaults(run=commands.envs)
    for name, run, text in (("train", commands.train, "run the job"), ("serve", commands.serve, "serve the model")):
        command = sub.add_parser(name, help=text)
        command.add_argument("config", metavar="CONFIG")
        command.set_defaults(run=run)
    return parser


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    # Unwind normally so the embedded vLLM server (a context manager) is stopped, not orphaned.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage or the help
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args.run(args)
    except ConfigError as exc:
        print("\n".join(exc.lines()), file=sys.stderr)
    except (FileNotFoundError, ModelNotFound) as exc:
        print(f"rlsetup {args.command}: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
