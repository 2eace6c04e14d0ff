"""bench.analysis.releases: two label releases of one corpus, and how far the recommendation moves (by hand)."""

import math

import pandas as pd
import pytest

from bench.analysis.releases import moves, release_pairs
from bench.run import labels_digest, turns_digest
from bench.types import Conversation, Corpus, Question, Turn


def corpus(evidence) -> Corpus:
    turns = (Turn("c1", "t1", "user", "u", "I like tea", 1.0, 0), Turn("c1", "t2", "assistant", "a", "noted", 2.0, 1))
    return Corpus("x", (Conversation("c1", turns),), (Question("q1", "c1", "what do I like?", None, evidence),))


def test_release_pairs_need_the_same_turns_and_other_labels():
    old, fixed = corpus(("t2",)), corpus(("t1",))
    assert turns_digest(old) == turns_digest(fixed) and labels_digest(old) != labels_digest(fixed)
    d = {"locomo": (turns_digest(old), labels_digest(old)), "locomo_2025": (turns_digest(fixed), labels_digest(fixed)),
         "demo": ("other", "x"), "copy": (turns_digest(old), labels_digest(old))}
    assert release_pairs(d) == [("locomo", "locomo_2025"), ("locomo_2025", "copy")]  # same labels: not a pair


def row(ds, strategy, t, f1, recall):
    return {"dataset": ds, "embedder": "e", "backend": "exact", "strategy": strategy, "threshold": t, "f1": f1, "recall": recall}


def test_moves_by_hand():
    best = pd.DataFrame([row("A", "hybrid5", 0.40, 0.30, 0.20), row("B", "hybrid5", 0.35, 0.33, 0.25)])
    summary = pd.DataFrame([row("A", "hybrid5", 0.40, 0.30, 0.20), row("B", "hybrid5", 0.40, 0.31, 0.21), row("B", "hybrid5", 0.35, 0.33, 0.25)])
    m = moves([("A", "B")], best, summary).iloc[0]
    assert (m["a_choice"], m["b_choice"], m["same_choice"]) == ("hybrid5 @ 0.40", "hybrid5 @ 0.35", False)
    assert m["threshold_shift"] == pytest.approx(-0.05)
    assert (m["a_on_b_f1"], m["a_on_b_recall"]) == (0.31, 0.21)
    assert m["regret"] == pytest.approx(0.02)  # B's best 0.33 - A's choice on B 0.31
    missing = moves([("A", "B")], best, summary.iloc[:1])
    assert math.isnan(missing.iloc[0]["regret"])


@pytest.mark.slow
def test_a_job_records_both_digests_so_the_report_need_not_reload_its_corpus(tmp_path_factory):
    """meta.json carries turns_sha256 and labels_sha256 (the report's "Label releases compared" reads them);
    they equal the digests of the job's corpus snapshot."""
    import json

    from demo_run import demo_run

    from bench.results.rundir import RunDir

    run = RunDir(demo_run(tmp_path_factory.mktemp("releases")))
    meta = json.loads((run.path / "meta.json").read_text())
    corpus = run.corpus()
    assert (meta["turns_sha256"], meta["labels_sha256"]) == (turns_digest(corpus), labels_digest(corpus))
