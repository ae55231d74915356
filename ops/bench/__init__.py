"""Benchmarks: ``python -m ops.bench NAME [--json FILE] ...``.

Each module here defines ``main(argv) -> int``; speed and memory targets live
here, never in timed tests.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path


def machine() -> dict:
    """The machine a result was measured on: its cores and load average (other work slows a bench)."""
    return {"cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()]}


def finish(result: dict, json_path: str | None) -> int:
    """Add :func:`machine` to ``result``, print it as JSON and write it to ``json_path`` if given."""
    result["machine"] = machine()
    text = json.dumps(result, indent=2)
    print(text)
    if json_path:
        Path(json_path).write_text(text + "\n")
    return 0


def exit_on_sigterm(say: Callable[[str], None], what: str) -> None:
    """Leave through ``sys.exit`` on SIGTERM, so the caller's ``finally`` and ``with`` blocks stop
    ``what`` it started (Python's default for SIGTERM ends the process at once and leaves its
    children, a private vLLM among them, running)."""

    def terminated(signum, frame) -> None:
        say(f"terminated (SIGTERM): stopping {what}")
        sys.exit(143)

    signal.signal(signal.SIGTERM, terminated)
