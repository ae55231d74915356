"""Export JSON Schema files from the contract models, for non-Python producers.

python -m ingest.export_schemas          # rewrite ingest/schemas/*.json
python -m ingest.export_schemas --check  # exit 1 if any file is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ingest.contract import RECORD_MODELS, SCHEMA_VERSION

SCHEMA_DIR = Path(__file__).parent / "schemas"


def rendered() -> dict[str, str]:
    out = {}
    for name, model in RECORD_MODELS.items():
        schema = model.model_json_schema(mode="validation")
        schema["$id"] = f"https://ratchet.dev/schemas/{name}.v{SCHEMA_VERSION}.json"
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        out[f"{name}.v{SCHEMA_VERSION}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only check that the files are up to date")
    args = parser.parse_args(argv)
    stale = []
    for filename, text in rendered().items():
        path = SCHEMA_DIR / filename
        if path.exists() and path.read_text() == text:
            continue
        stale.append(filename)
        if not args.check:
            SCHEMA_DIR.mkdir(exist_ok=True)
            path.write_text(text)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run: python -m ingest.export_schemas", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
