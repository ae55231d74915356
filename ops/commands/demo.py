"""ratchet demo"""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    from ops.demo import main

    return main(args.demo_args)


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        add_help=False,
        help="run the whole loop with simulated traffic and write a report (see `ratchet demo --help`)",
    )
    p.add_argument("demo_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)
