"""The ``ratchet`` command line. Subcommands live in ``ops/commands/``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import ops.commands
from ingest.brokers import security
from ingest.config import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ratchet",
        description="Ratchet: continual online learning for LLM agents. "
        "Settings come from RATCHET_* environment variables or the TOML file in RATCHET_CONFIG.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(ops.commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"ops.commands.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["demo"]:  # its options are its own (argparse cannot pass them through)
        from ops.demo import main as demo

        return demo(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        security()  # a bad Kafka security setting stops every command before it starts work
        return args.func(args)
    except ConfigError as exc:
        print(f"ratchet: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
