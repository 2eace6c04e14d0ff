"""bench.analysis.nextknob: the largest miss cause names the knob; measured alternatives quoted; usable or not."""

import pandas as pd

from bench.analysis.nextknob import next_knob, offline_embedders


def row(strategy, threshold, recall, *, embedder="minilm", backend="seekdb", savings=0.8, tokens=50.0, f1=0.3):
    return {"dataset": "ds", "embedder": embedder, "backend": backend, "strategy": strategy, "threshold": threshold,
            "recall": recall, "f1": f1, "token_savings": savings, "tokens_injected_mean": tokens}


NAN = float("nan")
SUMMARY = pd.DataFrame([
    row("hybrid5", 0.4, 0.19), row("hybrid5", 0.35, 0.22), row("hybrid5", 0.3, 0.25, tokens=60.0),
    row("threshold", 0.4, 0.21, tokens=80.0), row("hybrid5", 0.4, 0.41, embedder="e5_small"),
    row("full_context", NAN, 1.0, savings=0.0, tokens=600.0),
])
POINT = SUMMARY.iloc[0].to_dict()
KW = {"summary": SUMMARY, "full_context": ["full_context"], "usable_recall": 0.7}


def test_embedding_misses_point_to_the_embedders_and_say_recall_is_not_usable():
    lines = next_knob(causes={"embedding": 1769, "threshold": 150, "cap": 83}, point=POINT, embedders=["use_m3"], **KW)
    assert lines[0] == "- **Largest cause**: 1769 of 2002 missed gold memories (88%) are `embedding` misses: the embedder is the bottleneck."
    assert lines[1] == "  Measured in this run: `e5_small` reaches recall 0.410 with `hybrid5` (vs 0.190)."
    assert lines[2].startswith("  Try other embedders on the same data: `make sweep EMBEDDERS=use_m3` (offline)")
    assert lines[3].startswith("- **No setting tried reaches a usable recall** (≥ 0.70 while saving tokens): the best is "
                               "`hybrid5` ≥ 0.40 on `seekdb` / `e5_small` at recall 0.410.")


def test_threshold_and_cap_misses_quote_what_the_sweep_measured():
    lines = next_knob(causes={"threshold": 9, "cap": 2}, point=POINT, **KW)
    assert lines[1:3] == ["  Measured: at ≥ 0.35 recall is 0.220 (F1 0.300, 50 tokens per question).",
                          "  Measured: at ≥ 0.30 recall is 0.250 (F1 0.300, 60 tokens per question)."]
    lines = next_knob(causes={"threshold": 2, "cap": 9}, point=POINT, **KW)
    assert lines[1] == ("  Measured: without the cap (`threshold` alone at the same threshold) recall is 0.210 "
                        "(80 tokens per question): raise k toward that.")


def test_a_usable_setting_is_named():
    good = pd.concat([SUMMARY, pd.DataFrame([row("threshold", 0.2, 0.75, savings=0.6)])], ignore_index=True)
    lines = next_knob(causes={}, point=POINT, **{**KW, "summary": good})
    assert lines == ["- **Usable settings exist**: e.g. `threshold` ≥ 0.20 on `seekdb` reaches recall 0.750 and saves 60% of the tokens "
                     "(usable: recall ≥ 0.70).",
                     "  The recommendation recalls only 0.190: an agent would miss 81% of the gold memories. To ship a usable "
                     "recall at the fewest tokens, set `recommend.objective=min_tokens recommend.min_recall=0.7`."]


def test_offline_embedders_come_from_configs_and_leave_out_api_and_plumbing():
    names = offline_embedders()
    assert "minilm" in names and not {"hashing", "http", "synthetic", "qwen3_openrouter"} & set(names)
    assert "minilm" not in offline_embedders(exclude_targets=["bench.embedders.minilm.MiniLMEmbedder"])


def test_a_slice_below_min_n_is_never_offered_and_the_drop_is_counted():
    """A routing strategy's per-route slice (1 question of 1,536 here) reaches recall 1.0 while saving tokens: with
    recommend.min_n = 10 it is neither offered as usable nor quoted; the old code offered it as a usable setting."""
    sized = SUMMARY.assign(n_questions=1536)
    sliced = pd.concat([sized, pd.DataFrame([{**row("routing/profile", NAN, 1.0, savings=0.9), "n_questions": 1},
                                             {**row("hybrid5", 0.4, 0.9, embedder="e5_small"), "n_questions": 3}])],
                       ignore_index=True)
    lines = next_knob(causes={"embedding": 5}, point=POINT, **{**KW, "summary": sliced}, min_n=10)
    assert not any("Usable settings exist" in x or "routing/profile" in x.split("e.g.")[0] for x in lines)
    assert lines[1] == "  Measured in this run: `e5_small` reaches recall 0.410 with `hybrid5` (vs 0.190)."  # not the 3-question 0.9
    assert lines[-2].startswith("- **No setting tried reaches a usable recall**") and "recall 0.410" in lines[-2]
    assert lines[-1] == ("- 2 setting(s) measured on fewer than 10 questions are left out of these suggestions "
                         "(`recommend.min_n`; e.g. `routing/profile` on 1 question(s)).")
    # at min_n = 1 nothing is dropped and the slice is what it is: usable
    assert any("Usable settings exist" in x and "routing/profile" in x for x in next_knob(causes={}, point=POINT, **{**KW, "summary": sliced}, min_n=1))
