"""The first screen of a sweep (issue 24): the cheapest setting that reaches the recall target, the F1 optimum beside it,
a "what to ship" table before any prose, "no tried setting reaches recall R" said plainly, ties between stores said as
ties with the latency that decides, settings named for what they do (top-1, top-k), advice only where it can be followed.

Fixtures are hand-built per-question rows (expected values beside them) in a tiny run directory read by
``bench.analysis.tables.analyse``, as the report and the console read it; the LoCoMo cases run the CLI.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.recommend import RecommendConfig, recommend, shortlist
from bench.analysis.tables import analyse
from bench.analysis.verdict import first_screen, setting_name
from bench.cli.sweep import plain, plain_table, verdict_lines
from bench.results.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]

# strategies.json records (what bench.results.rundir.strategy_record keeps): a similarity-thresholded hybrid (top-5 under a
# threshold), a relative cut (delta) and a top-3 limit
RECORDS = [
    {"name": "hybrid5", "kind": "hybrid", "params": {"k": 5}, "roles": None, "threshold_on": "similarity", "thresholded": True},
    {"name": "relative_delta", "kind": "relative_delta", "params": {}, "roles": None, "threshold_on": "delta", "thresholded": True},
    {"name": "limit3", "kind": "limit", "params": {"k": 3}, "roles": None, "threshold_on": "similarity", "thresholded": False},
]


def q(conv, i, strategy, t, recall, tokens, f1, backend="exact", latency_ms=1.0):
    return {"dataset": "ds", "embedder": "emb", "backend": backend, "strategy": strategy, "threshold": t,
            "question_id": f"{conv}-q{i}", "conversation_id": conv, "category": "x", "adversarial": False, "n_gold": 1,
            "f1": f1, "recall": recall, "precision": f1, "tokens_injected": tokens, "empty": 0.0, "latency_ns": latency_ms * 1e6}


def rows_for(backend="exact", latency_ms=1.0, scale=1.0):
    """5 conversations x 2 questions. Per question (the same in every conversation):
    hybrid5 @0.3: recall 1.0, 100 tokens, F1 0.40   @0.5: recall 0.8, 40 tokens, F1 0.50   @0.7: recall 0.2, 10 tokens, F1 0.60
    relative_delta @0.0: recall 0.5, 8 tokens, F1 0.55 (top-1)   @0.1: recall 0.6, 30 tokens, F1 0.45
    limit3: recall 0.9, 60 tokens, F1 0.35 on q0; recall 0.7, 60 tokens on q1 (mean 0.8), F1 0.35
    ``scale`` multiplies every recall (0.5: nothing reaches 0.7)."""
    out = []
    for c in (f"c{i}" for i in range(5)):
        for i in range(2):
            for t, rec, tok, f1 in ((0.3, 1.0, 100, 0.40), (0.5, 0.8, 40, 0.50), (0.7, 0.2, 10, 0.60)):
                out.append(q(c, i, "hybrid5", t, rec * scale, tok, f1, backend, latency_ms))
            for t, rec, tok, f1 in ((0.0, 0.5, 8, 0.55), (0.1, 0.6, 30, 0.45)):
                out.append(q(c, i, "relative_delta", t, rec * scale, tok, f1, backend, latency_ms))
            out.append(q(c, i, "limit3", math.nan, (0.9 if i == 0 else 0.7) * scale, 60, 0.35, backend, latency_ms))
    return out


def write_run(d: Path, rows: list[dict]) -> RunDir:
    frame = pd.DataFrame(rows)
    d.mkdir()
    frame.to_parquet(d / "questions.parquet")
    frame.groupby(["dataset", "embedder", "backend", "strategy", "threshold"], dropna=False).agg(
        recall=("recall", "mean"), f1=("f1", "mean"), tokens_injected_mean=("tokens_injected", "mean")
    ).reset_index().to_csv(d / "summary.csv", index=False)
    (d / "strategies.json").write_text(json.dumps(RECORDS))
    (d / "meta.json").write_text("{}")  # a job directory: its strategies.json is read
    return RunDir(d)


def screen(run: RunDir, cfg: RecommendConfig | None = None):
    a = analyse(run, cfg or RecommendConfig.defaults(n_resamples=200))
    return a, first_screen(a.verdicts.iloc[0].to_dict(), a.rec.shortlist, a.rec.points, a.cfg)


def test_settings_are_named_for_what_they_do():
    delta, limit, hybrid = RECORDS[1], RECORDS[2], RECORDS[0]
    assert setting_name(delta, 0.0) == "top-1"  # similarity >= best - 0: the best match only
    assert setting_name(delta, 0.1) == "similarity ≥ best − 0.10"
    assert setting_name({"kind": "relative_ratio", "params": {}}, 1.0) == "top-1"
    assert setting_name(limit, math.nan) == "top-3"
    assert setting_name(hybrid, 0.2) == "top-5 with similarity ≥ 0.20"
    assert setting_name({"kind": "threshold", "params": {}, "roles": ["user"]}, 0.35) == "similarity ≥ 0.35 (user turns only)"
    assert setting_name({"kind": "full_context", "params": {}}, math.nan) == "full context (every earlier turn)"
    assert setting_name({"kind": "somebody_elses", "params": {}}, 0.5) == "" and setting_name(None, 0.5) == ""


def test_default_is_the_fewest_tokens_at_recall_07_with_the_f1_optimum_beside_it(tmp_path):
    a, s = screen(write_run(tmp_path / "run", rows_for()))
    assert (a.cfg.objective, a.cfg.min_recall) == ("min_tokens", 0.7)
    sl = a.rec.shortlist.set_index("role")
    # reaching recall 0.7: hybrid5@0.3 (100 tokens), hybrid5@0.5 (recall 0.8, 40 tokens), limit3 (0.8, 60) -> hybrid5@0.5
    rec = sl.loc["recommended"]
    assert (rec["strategy"], rec["threshold"], rec["recall"], rec["tokens"]) == ("hybrid5", 0.5, pytest.approx(0.8), pytest.approx(40))
    assert rec["what"] == "recommended: fewest tokens with recall ≥ 0.70" and rec["setting"] == "top-5 with similarity ≥ 0.50"
    # F1 optimum (no constraint): hybrid5@0.7, F1 0.60, recall 0.2 -- shown beside it, never recommended
    f1 = sl.loc["best_f1"]
    assert (f1["strategy"], f1["threshold"], f1["f1"], f1["recall"], f1["tokens"]) == ("hybrid5", 0.7, pytest.approx(0.6), pytest.approx(0.2), pytest.approx(10))
    assert list(sl.index) == ["recommended", "best_f1"] and sl["reaches_target"].tolist() == [True, False]
    assert s.header == ("what", "setting", "store", "recall [95 %]", "tokens [95 %]", "F1", "p50 / p99 ms")
    # every conversation is alike: the prediction interval is a point; latency 1 ms for every query
    assert s.rows[0] == ("recommended: fewest tokens with recall ≥ 0.70", "top-5 with similarity ≥ 0.50 (`hybrid5`)", "`exact`",
                         "0.800 [0.800, 0.800]", "40 [40, 40]", "0.500", "1.00 / 1.00")
    assert s.rows[1][:2] == ("best F1", "top-5 with similarity ≥ 0.70 (`hybrid5`)") and s.rows[1][3] == "0.200 [0.200, 0.200]"
    assert s.about.startswith("[ ] = 95 % prediction interval: where the mean over a new corpus of 5 conversations like these "
                              "should land (measured on 10 questions in 5 conversations); recall target 0.70 (`recommend.min_recall`)")
    assert s.headline.startswith("use top-5 with similarity ≥ 0.50 (`hybrid5`) on `exact` / `emb` (fewest tokens with recall ≥ 0.70)")


def test_the_old_objective_is_one_setting_away(tmp_path):
    a, s = screen(write_run(tmp_path / "run", rows_for()), RecommendConfig.defaults(objective="max_f1", min_recall=None, n_resamples=50))
    sl = a.rec.shortlist
    assert sl["role"].tolist() == ["recommended"] and sl.iloc[0]["what"] == "recommended: best F1"  # the F1 optimum: one row
    assert (sl.iloc[0]["strategy"], sl.iloc[0]["threshold"]) == ("hybrid5", 0.7)
    # max F1 under the recall target: hybrid5@0.5 (F1 0.50) beats limit3 (0.35) and hybrid5@0.3 (0.40)
    a2, _ = screen(write_run(tmp_path / "run2", rows_for()), RecommendConfig.defaults(objective="max_f1", n_resamples=50))
    assert a2.rec.shortlist.set_index("role").loc["recommended", "threshold"] == 0.5


def test_no_tried_setting_reaches_the_target_is_said_plainly(tmp_path):
    a, s = screen(write_run(tmp_path / "run", rows_for(scale=0.5)))  # best recall: hybrid5@0.3, 1.0 x 0.5 = 0.5
    v = a.verdicts.iloc[0]
    assert v["kind"] == "none"
    assert v["headline"] == ("no tried setting reaches recall 0.70; the closest is top-5 with similarity ≥ 0.30 (`hybrid5`) on "
                             "`exact` / `emb`: recall 0.500 at 100 tokens (lower `recommend.min_recall`, or try other settings)")
    assert a.rec.shortlist["role"].tolist() == ["closest", "best_f1"]
    assert [r[0] for r in s.rows] == ["highest recall (none reaches 0.70)", "best F1"]


def test_top1_is_called_top1_and_no_advice_to_go_below_delta_0(tmp_path):
    rows = [r for r in rows_for() if r["strategy"] == "relative_delta"]  # cheapest at recall >= 0.5: delta 0.00 (top-1)
    a, s = screen(write_run(tmp_path / "run", rows), RecommendConfig.defaults(min_recall=0.5, n_resamples=50))
    p = a.rec.points.iloc[0]
    assert (p["threshold"], p["setting"], p["note"]) == (0.0, "top-1", "")  # 0.00 is the lowest delta there is
    assert s.rows[0][1] == "top-1 (`relative_delta` at 0.00)"
    # a similarity threshold at the grid's lowest edge still gets the (followable) advice
    hyb = [r for r in rows_for() if r["strategy"] == "hybrid5"]
    a2, _ = screen(write_run(tmp_path / "run2", hyb), RecommendConfig.defaults(min_recall=0.9, n_resamples=50))
    assert a2.rec.points.iloc[0]["note"] == "0.30 is the lowest threshold swept: the optimum may lie beyond it (widen `thresholds`)"


def test_two_stores_that_tie_are_said_as_a_tie_with_the_latency_that_decides(tmp_path):
    # the same results on exact (1 ms per query) and sqlite_vec (3 ms): W/T/L 0/10/0 for every strategy
    run = write_run(tmp_path / "run", rows_for("exact", 1.0) + rows_for("sqlite_vec", 3.0))
    a, s = screen(run)
    v = a.verdicts.iloc[0]
    assert json.loads(v["tied_with"]) == [["emb", "sqlite_vec", "hybrid5"]]
    assert "too little data to choose" not in v["headline"]
    assert v["headline"].endswith(
        "; it ties with top-5 with similarity ≥ 0.50 (`hybrid5`) on `sqlite_vec` on every one of the 10 questions, so the "
        "store's latency decides (p50 / p99 per query: `exact` 1.00 / 1.00 ms, `sqlite_vec` 3.00 / 3.00 ms; fastest at p99: `exact`)")
    assert [r[0] for r in s.rows] == ["recommended: fewest tokens with recall ≥ 0.70", "ties with the recommended on every question", "best F1"]
    assert [r[2] for r in s.rows[:2]] == ["`exact`", "`sqlite_vec`"] and [r[-1] for r in s.rows[:2]] == ["1.00 / 1.00", "3.00 / 3.00"]
    # the console prints the same screen, plain
    from bench.analysis.tables import save

    save(run, a)
    lines = verdict_lines(run)
    assert lines[0] == "ds: " + plain(v["headline"])
    assert lines[1].split() [:3] == ["what", "setting", "store"] and "sqlite_vec" in lines[3] and lines[3].rstrip().endswith("3.00 / 3.00")


def test_shortlist_of_an_empty_recommendation_is_empty():
    assert shortlist(pd.DataFrame(), pd.DataFrame(), RecommendConfig.defaults()).empty
    assert plain_table(("a", "bb"), [("xyz", "1")]) == ["a    bb", "xyz  1"]
    assert plain(r"top-5 with similarity ≥ 0.50 (`hybrid5`) on `a\_b`") == "top-5 with similarity ≥ 0.50 (hybrid5) on a_b"


# --- LoCoMo: the CLI end to end (hashing embedder, exact store: seconds, not minutes)

def run_cli(reports: Path, data_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATA_DIR", "HYDRA_FULL_ERROR")}
    env.update(BENCH_DATA_DIR=str(data_dir), HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "bench", f"paths.reports={reports}", "progress=false", "dataset=locomo", "backend=exact",
           "embedder=hashing", *overrides]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def check_locomo_first_screen(reports: Path, res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 0, res.stderr[-3000:]
    latest = reports / "latest"
    v = pd.read_csv(latest / "analysis" / "verdict.csv").iloc[0]
    sl = pd.read_csv(latest / "analysis" / "shortlist.csv")
    lines = [ln.split("] - ", 1)[-1] for ln in (res.stdout + res.stderr).splitlines() if "[bench][" in ln]
    i = lines.index("locomo: " + plain(v["headline"]))
    assert lines[i + 1].split()[:3] == ["what", "setting", "store"] and "p50 / p99 ms" in lines[i + 1]
    if v["kind"] == "none":  # nothing reaches 0.7: said plainly, with the closest
        assert v["headline"].startswith("no tried setting reaches recall 0.70; the closest is")
        assert sl["role"].tolist()[0] == "closest" and sl.iloc[0]["recall"] < 0.7
    else:  # the headline never recommends a setting below the recall target (7255a18: recall 0.192 at the F1 optimum)
        rec = sl[sl["role"] == "recommended"].iloc[0]
        assert rec["recall"] >= 0.7 and lines[i + 2].startswith("  recommended: fewest tokens with recall ≥ 0.70")
    assert "best_f1" in set(sl["role"]) or "also best F1" in " ".join(sl["what"])
    md = (latest / "report.md").read_text()
    section = md.split("## Recommendation\n", 1)[1]
    assert section.lstrip().startswith("**locomo**: ") and section.split("\n\n")[1].startswith("| what | setting | store |")


@pytest.mark.slow
@pytest.mark.timeout(1200)  # run_cli waits up to 900 s
def test_locomo_fixture_first_screen(tmp_path):
    data = tmp_path / "corpora"
    (data / "locomo").mkdir(parents=True)
    (data / "locomo" / "locomo10.json").write_bytes((REPO / "tests" / "fixtures" / "data" / "locomo_tiny.json").read_bytes())
    check_locomo_first_screen(tmp_path / "reports", run_cli(tmp_path / "reports", data, "strategy=[limit,hybrid]"))


@pytest.mark.skipif(not (Path(os.environ.get("BENCH_DATA_DIR", "/nonexistent")) / "locomo" / "locomo10.json").is_file(),
                    reason="BENCH_DATA_DIR has no LoCoMo (locomo/locomo10.json)")
@pytest.mark.slow
@pytest.mark.timeout(1200)  # run_cli waits up to 900 s
def test_locomo_first_screen(tmp_path):
    data = Path(os.environ["BENCH_DATA_DIR"])
    check_locomo_first_screen(tmp_path / "reports", run_cli(tmp_path / "reports", data, "strategy=[limit,hybrid]"))
