"""Write the expanded contract Sessions (NNN-name.json) of the blind case files (cases/NNN-name.json).

The cases are expanded by ``rewards.corpus.expand`` (no model, no network); the files written
here freeze what that gives. Run from the repository root:

    python rewards/corpora/blind/build.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from rewards.corpus import check_case, expand  # noqa: E402

STYLES = {"A", "B", "C"}


def main() -> int:
    cases = sorted((HERE / "cases").glob("[0-9][0-9][0-9]-*.json"))
    written = set()
    for index, path in enumerate(cases):
        case = json.loads(path.read_text(encoding="utf-8"))
        check_case(path.name, case)
        assert case.get("style") in STYLES, f"{path.name}: style {case.get('style')!r}"
        assert 3 <= sum("call" in s for s in case["steps"]) <= 12, f"{path.name}: 3 to 12 tool calls"
        session = json.loads(expand(case, "blind", path.stem, index).model_dump_json())
        out = HERE / path.name
        out.write_text(
            json.dumps({"label": case["label"], "session": session}, ensure_ascii=False) + "\n",
            encoding="utf-8",
        )
        written.add(out.name)
    for stale in HERE.glob("[0-9][0-9][0-9]-*.json"):
        if stale.name not in written:
            stale.unlink()
    print(f"wrote {len(written)} sessions to {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
