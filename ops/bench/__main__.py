from __future__ import annotations

import importlib
import pkgutil
import sys

import ops.bench


def main() -> int:
    names = sorted(m.name for m in pkgutil.iter_modules(ops.bench.__path__) if not m.name.startswith("_"))
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help") or sys.argv[1] not in names:
        print(f"usage: python -m ops.bench {{{','.join(names)}}} [--json FILE] ...", file=sys.stderr)
        return 0 if len(sys.argv) >= 2 and sys.argv[1] in ("-h", "--help") else 2
    return importlib.import_module(f"ops.bench.{sys.argv[1]}").main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
