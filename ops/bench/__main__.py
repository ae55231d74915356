from __future__ import annotations

import importlib
import pkgutil
import sys

import ops.bench


def main() -> int:
    modules = sorted(m.name for m in pkgutil.iter_modules(ops.bench.__path__) if not m.name.startswith("_"))
    names = [m.replace("_", "-") for m in modules]  # learner_memory runs as `learner-memory`
    wanted = sys.argv[1].replace("_", "-") if len(sys.argv) >= 2 else None
    if wanted is None or wanted in ("-h", "--help") or wanted not in names:
        print(f"usage: python -m ops.bench {{{','.join(names)}}} [--json FILE] ...", file=sys.stderr)
        return 0 if wanted in ("-h", "--help") else 2
    return importlib.import_module(f"ops.bench.{wanted.replace('-', '_')}").main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
