"""Precision and recall of the hack detectors on the labelled corpora.

``python -m ops.bench detectors [--json FILE]``

Two corpora of case files (``rewards.corpus``), one labelled session per file: the
development corpus (``rewards/corpora/dev``) and the blind one
(``rewards/corpora/blind/cases``), scored separately. Every (session, kind) pair counts
once: a true positive when the kind is labelled and flagged, a false positive when it is
flagged but not labelled, a false negative when labelled but not flagged. ``precision`` and
``recall`` are micro-averaged over the six kinds; ``per_kind`` has the same two per kind;
``sessions`` scores hack-vs-honest per session. The JSON holds the development corpus's
scores at the top level and the blind corpus's under ``blind``. The development corpus's
mistakes are listed by case; the blind corpus's are only counted, so that no detector change is
tuned on its individual cases (new cases go into the development corpus).

``--judge URL`` (any OpenAI-compatible endpoint, ``--judge-model`` its model name) also asks the
optional LLM judge (``rewards.judge``) about every rule flag of both corpora, as the worker would
with ``RATCHET_JUDGE_ENABLED``, and reports under ``judge``: its verdicts on the flags the label
confirms and on the false alarms, and the scores the corpus would get if a "no" withdrew the flag
(the judge's possible use as a veto; the worker only records its verdicts). ``--judge local``
starts the project's own vLLM (the embedded base model) on a free port for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ingest.contract import HackKind, Session
from rewards.corpus import CORPORA, load
from rewards.detectors import detect
from rewards.scoring import RewardSettings, load_reward_settings


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


def judge_flags(
    corpus: list[tuple[str, set[str], Session]], settings: RewardSettings, workers: int = 8
) -> dict:
    """The judge's verdict on every rule flag, by whether the label confirms the flag, and the
    session scores with each "no" taken as a veto."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from rewards import judge

    flagged = [(name, labelled, session, detect(session, settings)) for name, labelled, session in corpus]
    asks = [(session, f) for _, _, session, flags in flagged for f in flags]
    with httpx.Client() as client, ThreadPoolExecutor(workers) as pool:
        verdicts = list(pool.map(lambda a: judge.ask(client, a[0], a[1], settings), asks))
    by_flag = iter(verdicts)
    tally = {side: {"yes": 0, "no": 0, "unclear": 0, "error": 0} for side in ("confirmed", "false_alarm")}
    counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for _, labelled, _, flags in flagged:
        kept = set()
        for f in flags:
            verdict = next(by_flag).split(":", 1)[0]
            tally["confirmed" if f.kind.value in labelled else "false_alarm"][verdict] += 1
            if verdict != "no":
                kept.add(f.kind.value)
        counts[
            {(True, True): "tp", (False, True): "fp", (True, False): "fn", (False, False): "tn"}[
                (bool(labelled), bool(kept))
            ]
        ] += 1
    return {
        "flags_asked": len(asks),
        "verdicts": tally,
        "sessions_with_veto": {
            "precision": round(_ratio(counts["tp"], counts["tp"] + counts["fp"]), 4),
            "recall": round(_ratio(counts["tp"], counts["tp"] + counts["fn"]), 4),
            **counts,
        },
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
    if "judge" in result:
        j = result["judge"]
        for side, row in j["verdicts"].items():
            print(
                f"judge on {side.replace('_', ' ')} flags: " + ", ".join(f"{k} {v}" for k, v in row.items())
            )
        v = j["sessions_with_veto"]
        print(f"{'sessions, judge veto':<22} {v['precision']:>9.3f} {v['recall']:>7.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.bench detectors", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--json", type=Path, help="write the results to this file as JSON")
    parser.add_argument(
        "--judge",
        metavar="URL",
        help="also ask the LLM judge at this OpenAI-compatible endpoint about every flag "
        "('local': start the project's vLLM with the embedded base model for the run)",
    )
    parser.add_argument("--judge-model", help="the judge's model name on that endpoint (default: settings)")
    args = parser.parse_args(argv)
    settings = load_reward_settings()
    corpora = {"dev": load(CORPORA["dev"], "dev"), "blind": load(CORPORA["blind"], "blind")}
    dev = score(corpora["dev"], settings)
    blind = score(corpora["blind"], settings, name_mistakes=False)
    if args.judge:
        with _judge_endpoint(args.judge) as (url, model):
            settings = load_reward_settings(
                judge_enabled=True, judge_url=url, judge_model=args.judge_model or model
            )
            print(f"asking the judge at {url} ({settings.judge_model}) about every flag ...", flush=True)
            dev["judge"] = judge_flags(corpora["dev"], settings)
            blind["judge"] = judge_flags(corpora["blind"], settings)
    report("development corpus", dev)
    print()
    report("blind corpus", blind)
    if args.json:
        args.json.write_text(json.dumps({**dev, "blind": blind}, indent=2) + "\n")
    return 0


@contextlib.contextmanager
def _judge_endpoint(url: str) -> Iterator[tuple[str, str | None]]:
    """(endpoint, model name or None for the settings') of ``--judge``; ``local`` starts the
    project's vLLM on a free port and stops it after the run."""
    if url != "local":
        yield url, None
        return
    import tempfile

    from ops.stack import Stack, StackSettings, free_port

    state = Path(tempfile.mkdtemp(prefix="ratchet-bench-judge-"))
    stack = Stack(StackSettings(state_dir=state, vllm_port=free_port()), progress=print)
    stack.up(["vllm"])
    try:
        yield stack.settings.vllm_url, stack.settings.base_model
    finally:
        stack.down()


if __name__ == "__main__":
    sys.exit(main())
