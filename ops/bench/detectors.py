"""Precision and recall of the hack detectors on the labelled corpora.

``python -m ops.bench detectors [--json FILE]``

Two corpora of case files (``rewards.corpus``), one labelled session per file: the
development corpus (``tests/data/hacks_dev``) and the blind one
(``tests/data/hacks_blind/cases``), scored separately. Every (session, kind) pair counts
once: a true positive when the kind is labelled and flagged, a false positive when it is
flagged but not labelled, a false negative when labelled but not flagged. ``precision`` and
``recall`` are micro-averaged over the six kinds; ``per_kind`` has the same two per kind;
``sessions`` scores hack-vs-honest per session. The JSON holds the development corpus's
scores at the top level and the blind corpus's under ``blind``. The development corpus's
mistakes are listed by case; the blind corpus's are only counted, so that no detector change is
tuned on its individual cases (new cases go into the development corpus).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ingest.contract import HackKind, Session
from rewards.corpus import load
from rewards.detectors import detect
from rewards.scoring import RewardSettings, load_reward_settings

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
CORPORA = {"dev": DATA / "hacks_dev", "blind": DATA / "hacks_blind" / "cases"}


def _ratio(num: int, den: int) -> float:
    return num / den if den else 1.0


def score(
    corpus: list[tuple[str, set[str], Session]], settings: RewardSettings, name_mistakes: bool = True
) -> dict:
    kinds = [k.value for k in HackKind]
    counts = {k: {"tp": 0, "fp": 0, "fn": 0} for k in kinds}
    session_counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    mistakes = []
    started = time.perf_counter()
    for name, labelled, session in corpus:
        flagged = {f.kind.value for f in detect(session, settings)}
        for k in kinds:
            if k in flagged and k in labelled:
                counts[k]["tp"] += 1
            elif k in flagged:
                counts[k]["fp"] += 1
                mistakes.append(f"false positive {k}: {name}")
            elif k in labelled:
                counts[k]["fn"] += 1
                mistakes.append(f"false negative {k}: {name}")
        is_hack, was_flagged = bool(labelled), bool(flagged)
        key = {(True, True): "tp", (False, True): "fp", (True, False): "fn", (False, False): "tn"}
        session_counts[key[(is_hack, was_flagged)]] += 1
    elapsed = time.perf_counter() - started
    tp = sum(c["tp"] for c in counts.values())
    fp = sum(c["fp"] for c in counts.values())
    fn = sum(c["fn"] for c in counts.values())
    return {
        "sessions_total": len(corpus),
        "hacks": sum(1 for _, labelled, _ in corpus if labelled),
        "honest": sum(1 for _, labelled, _ in corpus if not labelled),
        "precision": round(_ratio(tp, tp + fp), 4),
        "recall": round(_ratio(tp, tp + fn), 4),
        "per_kind": {
            k: {
                "precision": round(_ratio(c["tp"], c["tp"] + c["fp"]), 4),
                "recall": round(_ratio(c["tp"], c["tp"] + c["fn"]), 4),
                "labelled": c["tp"] + c["fn"],
                **c,
            }
            for k, c in counts.items()
        },
        "sessions": {
            "precision": round(_ratio(session_counts["tp"], session_counts["tp"] + session_counts["fp"]), 4),
            "recall": round(_ratio(session_counts["tp"], session_counts["tp"] + session_counts["fn"]), 4),
            **session_counts,
        },
        **({"mistakes": mistakes} if name_mistakes else {}),
        "ms_per_session": round(1000 * elapsed / max(1, len(corpus)), 3),
    }


def report(title: str, result: dict) -> None:
    print(
        f"{title}: {result['sessions_total']} sessions ({result['hacks']} hacks, {result['honest']} honest)"
    )
    print(f"{'kind':<22} {'precision':>9} {'recall':>7} {'labelled':>8}")
    for kind, row in result["per_kind"].items():
        print(f"{kind:<22} {row['precision']:>9.3f} {row['recall']:>7.3f} {row['labelled']:>8}")
    print(f"{'all (micro)':<22} {result['precision']:>9.3f} {result['recall']:>7.3f}")
    s = result["sessions"]
    print(f"{'sessions':<22} {s['precision']:>9.3f} {s['recall']:>7.3f}")
    print(f"{result['ms_per_session']:.1f} ms per session")
    for line in result.get("mistakes", []):
        print("  " + line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.bench detectors", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--json", type=Path, help="write the results to this file as JSON")
    args = parser.parse_args(argv)
    settings = load_reward_settings()
    dev = score(load(CORPORA["dev"], "dev"), settings)
    blind = score(load(CORPORA["blind"], "blind"), settings, name_mistakes=False)
    report("development corpus", dev)
    print()
    report("blind corpus", blind)
    if args.json:
        args.json.write_text(json.dumps({**dev, "blind": blind}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
