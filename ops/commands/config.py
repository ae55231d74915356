"""ratchet config check"""

from __future__ import annotations

import argparse
import os
import sys


def check(args: argparse.Namespace) -> int:
    from ops.config_reference import SETTINGS, config_problems

    path = args.file or os.environ.get("RATCHET_CONFIG")
    problems = config_problems(path)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s); docs/configuration.md lists every setting", file=sys.stderr)
        return 1
    checked = (
        f"{path} and the RATCHET_* environment" if path else "the RATCHET_* environment (no RATCHET_CONFIG)"
    )
    print(f"{checked}: every setting is read by a stage ({len(SETTINGS)} settings classes)")
    return 0


def register(sub) -> None:
    config = sub.add_parser("config", help="the TOML configuration file")
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = actions.add_parser(
        "check",
        help="report unknown RATCHET_* variables, unknown tables and keys (with the likeliest intended "
        "one), wrong types and refused values; exit 1 if any",
    )
    p.add_argument("file", nargs="?", help="the TOML file (default: $RATCHET_CONFIG)")
    p.set_defaults(func=check)
