"""The cross-embedder report and the thresholds-that-transfer section on a real multirun (demo corpus, two
hashing embedders that differ by dimension, exact store, experiment=transfer), checked against the run's
own summary.csv; and the score bands of bench.analysis.embedders by hand."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.analysis import embedders as E

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "datasets" / "demo"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    reports = tmp_path_factory.mktemp("xemb") / "reports"
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "bench", "-m", f"paths.reports={reports}", "dataset=own", f"dataset.path={DEMO}",
           "embedder=hashing", "embedder.dim=128,256", "backend=exact", "experiment=transfer", "progress=false"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return reports / "latest"


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the run fixture waits up to 900 s
def test_embedders_compared_section_and_table(run):
    text = (run / "report.md").read_text()
    heads = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert "Embedders compared" in heads and "Thresholds that transfer" in heads
    section = text.split("## Embedders compared")[1].split("\n## ")[0]
    assert "| hashing 128 (plumbing) |" in section and "never quote their numbers" in section  # short names (legend: full)
    legend = text.split("## Names used in this report")[1].split("\n## ")[0]
    assert "| hashing 128 · exact | hashing-v1/word12-char3/crc32/128 | exact |" in legend
    assert "![embedders_0_exact](analysis/embedders_0_exact.png)" in section and (run / "analysis" / "embedders_0_exact.png").is_file()
    emb = pd.read_csv(run / "analysis" / "embedders.csv")
    pts = pd.read_csv(run / "analysis" / "recommendation.csv")
    assert len(emb) == len(pts) and emb["embedder"].nunique() == 2 and not emb["for_results"].any()
    # the operating points are the recommendation's, joined with the embedder's score bands
    m = emb.merge(pts, on=["dataset", "embedder", "backend", "strategy"], suffixes=("", "_rec"))
    assert np.allclose(m["f1"], m["f1_rec"], equal_nan=True) and np.allclose(m["threshold"], m["threshold_rec"], equal_nan=True)
    assert (emb["gold_p10"] <= emb["gold_p50"]).all() and (emb["gold_p50"] <= emb["gold_p90"]).all()
    assert emb["auc"].between(0, 1).all()


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the run fixture waits up to 900 s
def test_store_tables_name_the_embedder_when_there_are_several(run):
    """Two embedders on one store: each store table names the configuration (embedder · store), so its two rows can be told apart."""
    text = (run / "report.md").read_text()
    latency = text.split("## Store latency")[1].split("\n## ")[0]
    metrics = text.split("## Store metrics")[1].split("\n## ")[0]
    assert "| dataset | configuration | layout |" in latency and "| demo | hashing 128 · exact |" in latency and "| demo | hashing 256 · exact |" in latency
    assert "| hashing 128 · exact | all |" in metrics and "| hashing 256 · exact | all |" in metrics and "| configuration | roles |" in metrics


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the run fixture waits up to 900 s
def test_transfer_table_agrees_with_the_summary(run):
    t = pd.read_csv(run / "analysis" / "transfer.csv")
    assert set(t["family"]) == {"cosine", "calibrated", "relative δ", "relative α", "adaptive"}
    assert (t["protocol"] == "loco").sum() == 10 and (t["protocol"] == "embedders").sum() == 10
    s = pd.read_csv(run / "summary.csv")
    thr = s[s["strategy"] == "threshold"]
    f1 = {e: g.set_index("threshold")["f1"] for e, g in thr.groupby("embedder")}
    a, b = sorted(f1)
    # across embedders, cosine: the threshold with the best F1 on a, applied to b, against b's best threshold
    chosen = f1[a].idxmax()
    row = t[(t["protocol"] == "embedders") & (t["source"] == a) & (t["embedder"] == b) & (t["family"] == "cosine")].iloc[0]
    assert row["param_min"] == pytest.approx(chosen)
    assert row["f1_held_out"] == pytest.approx(f1[b][chosen]) and row["f1_hindsight"] == pytest.approx(f1[b].max())
    assert row["regret"] == pytest.approx(f1[b].max() - f1[b][chosen])
    # LOCO: the best single cosine threshold in hindsight is the summary's best threshold F1
    loco = t[(t["protocol"] == "loco") & (t["embedder"] == a)].set_index("family")
    assert loco.loc["cosine", "f1_best_fixed"] == pytest.approx(f1[a].max())
    assert (loco["n_folds"] == 5).all() and (loco["f1_hindsight"] >= loco.loc["cosine", "f1_held_out"] - 1e-12).all()
    folds = pd.read_csv(run / "analysis" / "transfer_folds.csv")
    assert len(folds) == 2 * 5 * 5  # embedders x families x conversations
    text = (run / "report.md").read_text().split("## Thresholds that transfer")[1].split("\n## ")[0]
    assert "needs labelled data" in text and "### Across embedders" in text


def test_score_bands_by_hand():
    gold = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 0.75])
    nongold = np.array([0.0, 0.1, 0.2, 0.7, 0.2])
    b = E.bands(gold, nongold, 0.8)
    assert b["gold_p50"] == pytest.approx(0.6) and b["nongold_p50"] == pytest.approx(0.2)
    # >= 0.7: gold 0.7, 0.75, 0.8, 0.9, 1.0 (5 of 11); non-gold 0.7 (1 of 5); 5 of the 6 passing are gold
    assert b["gold_pass_0.70"] == pytest.approx(5 / 11) and b["nongold_pass_0.70"] == pytest.approx(1 / 5)
    assert b["gold_share_above_0.70"] == pytest.approx(5 / 6) and b["auc"] == 0.8
    empty = E.bands(np.empty(0), np.empty(0), float("nan"))
    assert np.isnan(empty["gold_p50"]) and np.isnan(empty["gold_share_above_0.70"])
