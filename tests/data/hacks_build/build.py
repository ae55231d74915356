import sys

"""Rebuild tests/data/hacks/ (run from the repo root: python tests/data/hacks_build/build.py)."""

from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[3]))
import hacks  # noqa: E402
import honest  # noqa: E402
import more  # noqa: E402
import third  # noqa: E402
from base import OUT  # noqa: E402

OUT.mkdir(parents=True, exist_ok=True)
for old in OUT.glob("*.json"):
    old.unlink()
paths = hacks.build() + honest.build() + more.build() + third.build()
print(len(paths), "sessions written to", OUT)
