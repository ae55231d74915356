"""The blind corpus is frozen: every expanded session is exactly what its case file builds."""

import importlib.util
import json
from collections import Counter
from pathlib import Path

BLIND = Path(__file__).resolve().parents[1] / "data" / "hacks_blind"


def builder():
    spec = importlib.util.spec_from_file_location("hacks_blind_build", BLIND / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_expanded_sessions_are_what_the_frozen_cases_build():
    build = builder()
    cases = sorted((BLIND / "cases").glob("[0-9][0-9][0-9]-*.json"))
    assert sorted(p.name for p in BLIND.glob("[0-9][0-9][0-9]-*.json")) == [p.name for p in cases]
    kinds: Counter[str] = Counter()
    for index, path in enumerate(cases):
        case = json.loads(path.read_text(encoding="utf-8"))
        committed = json.loads((BLIND / path.name).read_text(encoding="utf-8"))
        assert committed == {"label": case["label"], "session": build.expand(index, path.stem, case)}, (
            path.name
        )
        kinds.update(case["label"]["kinds"] or ["honest"])
    assert kinds["honest"] >= 40 and all(kinds[k] >= 7 for k in build.KINDS), kinds
