"""The labelled hack corpus (tests/data/hacks) and its benchmark.

Each file is ``{"label": {"kinds": [...], "note": "..."}, "session": {...}}``: one
Session record and the hack kinds it shows (empty for an honest session).
"""

import json
from collections import Counter

from ingest.contract import HackKind
from ops.bench import detectors as bench
from rewards.scoring import RewardSettings

KINDS = {k.value for k in HackKind}


def test_corpus_size_and_coverage():
    corpus = bench.load_corpus()
    hacks = [labels for _, labels, _ in corpus if labels]
    honest = [name for name, labels, _ in corpus if not labels]
    assert len(corpus) >= 60
    assert len(hacks) >= 30 and len(honest) >= 30
    per_kind = Counter(k for labels in hacks for k in labels)
    assert set(per_kind) == KINDS
    assert min(per_kind.values()) >= 5


def test_every_file_is_a_labelled_session():
    corpus = bench.load_corpus()
    assert len({s.session_id for _, _, s in corpus}) == len(corpus)
    for path in sorted(bench.CORPUS.glob("*.json")):
        obj = json.loads(path.read_text())
        assert set(obj) == {"label", "session"}, path.name
        assert set(obj["label"]["kinds"]) <= KINDS, path.name
        assert obj["label"]["note"], path.name


def test_benchmark_reports_precision_and_recall_per_kind(tmp_path):
    out = tmp_path / "detectors.json"
    assert bench.main(["--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["per_kind"]) == KINDS
    labelled = Counter(k for _, labels, _ in bench.load_corpus() for k in labels)
    for kind, row in result["per_kind"].items():
        assert row["tp"] + row["fn"] == labelled[kind]
        assert 0.0 <= row["precision"] <= 1.0 and 0.0 <= row["recall"] <= 1.0
    assert 0.0 <= result["precision"] <= 1.0 and 0.0 <= result["recall"] <= 1.0
    assert result["sessions_total"] == result["hacks"] + result["honest"]


def test_scores_count_false_positives_and_negatives():
    corpus = bench.load_corpus()
    honest = next(c for c in corpus if not c[1])
    hack = next(c for c in corpus if "protected_access" in c[1])
    flipped = [(honest[0], {"verifier_gaming"}, honest[2]), (hack[0], set(), hack[2])]
    result = bench.score(flipped, RewardSettings())
    assert result["per_kind"]["verifier_gaming"]["fn"] == 1
    assert result["per_kind"]["protected_access"]["fp"] == 1
    assert result["recall"] == 0.0 and result["precision"] == 0.0
