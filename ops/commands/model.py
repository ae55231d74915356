"""ratchet model prepare"""

from __future__ import annotations

import argparse
import sys


def run(args: argparse.Namespace) -> int:
    from ops.model import prepare_model
    from ops.stack import load_settings

    print(prepare_model(load_settings().cache_dir, lambda m: print(m, file=sys.stderr)))
    return 0


def register(sub) -> None:
    model = sub.add_parser("model", help="the served base model")
    actions = model.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser(
        "prepare",
        help="convert the bundled SmolLM2 GGUF to a Hugging Face folder (cached) and print its path",
    )
    model.set_defaults(func=run)
