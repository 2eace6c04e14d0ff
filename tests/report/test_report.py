"""bench.report on a real finished run (demo corpus, hashing embedder, exact store): the report starts
with the recommendation, its numbers agree with the tables they come from, settings come from the
run's config, and calibration/attribution degrade to a stated reason when the corpus snapshot is gone."""

import json
import math
import re
import shutil

import pandas as pd
import pytest
import yaml
from demo_run import demo_run

from bench.analysis.recommend import RecommendConfig, recommend
from bench.analysis.tables import load_settings, write_tables
from bench.cli import report as report_cli
from bench.report import markdown as report
from bench.results.rundir import RunDir


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return demo_run(tmp_path_factory.getbasetemp())


@pytest.fixture()
def copy(run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst


def sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, flags=re.MULTILINE)


@pytest.mark.slow
def test_report_starts_with_an_actionable_recommendation(run):
    text = (run / "report.md").read_text()
    heads = sections(text)
    assert heads[0] == "Recommendation"
    assert heads[1] == "What would help most"
    for name in ("Operating points (every configuration at its chosen threshold)", "Pareto frontier: recall vs injected tokens",
                 "Stability across conversations of this corpus (leave one conversation out)", "Calibration: where relevant and irrelevant memories score",
                 "Claims from popular articles, measured on your data", "Best threshold by F1 per strategy", "Full sweep"):
        assert name in heads, name
    best = pd.read_csv(run / "analysis" / "recommendation.csv").query("best").iloc[0]
    rec = text.split("## Operating points")[0]
    verdict = pd.read_csv(run / "analysis" / "verdict.csv").iloc[0]
    # the first screen (issue 24): the verdict, then the "what to ship" table before any prose
    first = rec.split("## Recommendation\n\n", 1)[1].split("\n\n")
    assert first[0] == f"**demo**: {verdict['headline']}."
    assert first[1].startswith("| what | setting | store | recall [95 %] | tokens [95 %] | F1 | p50 / p99 ms |\n|---|")
    assert f"| recommended: fewest tokens with recall ≥ 0.40 | {best['setting']} (`{best['strategy']}`) | `exact` | " \
           f"{best['recall']:.3f} [{best['recall_pred_lo']:.3f}, {best['recall_pred_hi']:.3f}] |" in first[1]
    assert first[2].startswith("[ ] = 95 % prediction interval: where the mean over a new corpus of 5 conversations like these")
    if verdict["kind"] == "too_little_data":
        assert f"- **Why no firm choice**: {verdict['reasons']}." in rec
    else:
        assert verdict["kind"] == "use" and verdict["headline"].startswith(f"use {best['setting']} (`{best['strategy']}`)")
    assert f"- **Measured** at the recommended point, `{best['strategy']}` with similarity ≥ {best['threshold']:.2f}" in rec
    # the headline's range is the prediction interval, labelled; the CI about the mean follows, labelled (issue 23)
    assert (f"F1 {best['f1']:.3f} [{best['f1_pred_lo']:.3f}, {best['f1_pred_hi']:.3f}]" in rec
            and f"(95% for a new corpus of {best['n_conversations']} conversations like these)" in rec)
    assert f"the mean of conversations like these (95% CI): F1 [{best['f1_lo']:.3f}, {best['f1_hi']:.3f}]" in rec
    assert best["f1_pred_lo"] <= best["f1_lo"] <= best["f1_hi"] <= best["f1_pred_hi"]
    assert "about the mean of conversations like these (Student t with conversations − 1 degrees of freedom" in rec
    assert "LOCO gap" in rec and "How sure" in rec and "Runner-up" in rec and "Scores" in rec
    assert f") in {best['n_conversations']} conversations with a scored question (the intervals' conversations)." in rec
    assert "Plumbing run" in text.split("## Recommendation")[0]  # hashing embedder: flagged before anything else


@pytest.mark.slow
def test_recommendation_table_agrees_with_summary_and_recompute(run):
    pts = pd.read_csv(run / "analysis" / "recommendation.csv")
    summary = pd.read_csv(run / "summary.csv")
    assert pts["best"].sum() == 1 and set(pts["strategy"]) == set(summary["strategy"])
    for _, p in pts.iterrows():
        s = summary[summary["strategy"] == p["strategy"]]
        s = s[s["threshold"].isna()] if math.isnan(p["threshold"]) else s[(s["threshold"] - p["threshold"]).abs() < 1e-9]
        assert len(s) == 1
        assert p["f1"] == pytest.approx(s.iloc[0]["f1"]) and p["recall"] == pytest.approx(s.iloc[0]["recall"])
        assert p["tokens"] == pytest.approx(s.iloc[0]["tokens_injected_mean"])
        assert p["f1_lo"] <= p["f1"] <= p["f1_hi"]
    thr = summary[summary["strategy"] == "threshold"]
    # the shipped objective: fewest tokens with recall >= the target (0.4 in tests/demo_run.py)
    assert pts.set_index("strategy").loc["threshold", "tokens"] == pytest.approx(thr[thr["recall"] >= 0.4]["tokens_injected_mean"].min())
    again = recommend(pd.read_parquet(run / "questions.parquet"), RecommendConfig.defaults(n_resamples=20, min_recall=0.4))
    assert again.points["threshold"].equals(pts["threshold"]) and again.points["f1"].tolist() == pytest.approx(pts["f1"].tolist())


@pytest.mark.slow
def test_analysis_tables_written(run):
    a = run / "analysis"
    for name in ("recommendation.csv", "curves.csv", "loco.csv", "loco_folds.csv", "categories.csv", "significance.csv",
                 "attribution.parquet", "attribution_counts.csv"):
        assert (a / name).exists(), name
    folds = pd.read_csv(a / "loco_folds.csv")
    assert set(folds["strategy"]) == {"threshold", "hybrid5"} and folds["conversation_id"].nunique() == 5
    sig = pd.read_csv(a / "significance.csv")
    assert len(sig) == 3 and (sig["p_holm"] >= sig["p"]).all()
    cats = pd.read_csv(a / "categories.csv")
    assert "adversarial" in set(cats["category"]) or cats["adversarial"].any()
    misses = pd.read_parquet(a / "attribution.parquet")
    rows = pd.read_parquet(run / "questions.parquet")
    pts = pd.read_csv(a / "recommendation.csv")
    for strategy in ("threshold", "hybrid5", "limit5"):  # every missed gold memory is attributed exactly once
        t = pts.set_index("strategy").loc[strategy, "threshold"]
        r = rows[(rows["strategy"] == strategy) & ~rows["adversarial"]]
        r = r[r["threshold"].isna()] if math.isnan(t) else r[(r["threshold"] - t).abs() < 1e-9]
        assert (misses["strategy"] == strategy).sum() == (r["n_gold"] - r["n_correct"]).sum(), strategy
    assert set(misses["cause"]) <= {"filter", "embedding", "store", "threshold", "cap", "decay/tier"}
    assert "full_context" not in set(misses["strategy"])  # ignores the store: not replayed


@pytest.mark.slow
def test_settings_come_from_the_runs_config(copy):
    cfg_path = copy / "config_resolved.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["recommend"] = {"objective": "max_recall", "token_budget": 50, "n_resamples": 50, "per_category": True, "test_resamples": 100,
                        "ci_method": "percentile"}
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert load_settings(RunDir(copy)) == RecommendConfig.defaults(objective="max_recall", token_budget=50, n_resamples=50,
                                                                   per_category=True, test_resamples=100, seed=cfg["seed"],
                                                                   ci_method="percentile")
    text = report.write_report(copy, write_tables(copy)).read_text()
    assert "maximise recall subject to mean injected tokens <= 50" in text and "50 resamples of whole conversations, percentile" in text
    pts = pd.read_csv(copy / "analysis" / "recommendation.csv")
    assert (pts.loc[pts["feasible"], "tokens"] <= 50).all() and not pts.set_index("strategy").loc["full_context", "feasible"]
    assert "own_threshold" in pd.read_csv(copy / "analysis" / "categories.csv")
    cfg["recommend"] = {"objectve": "max_f1"}
    cfg_path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=r"config_resolved.yaml: recommend has unknown key\(s\) \['objectve'\]"):
        report.write_report(copy, write_tables(copy))


def test_defaults_without_config(tmp_path):
    assert load_settings(RunDir(tmp_path)) == RecommendConfig.defaults()


@pytest.mark.slow
def test_the_dataset_path_is_never_read_again(copy):
    """The report reads the corpus snapshot: a dataset path that no longer exists changes nothing."""
    cfg_path = copy / "config_resolved.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["dataset"]["path"] = str(copy / "no_such_corpus")
    cfg["recommend"] = {"n_resamples": 50, "test_resamples": 100}
    cfg_path.write_text(yaml.safe_dump(cfg))
    text = report.write_report(copy, write_tables(copy)).read_text()
    assert "Not available" not in text and "AUC " in text and "## Why gold memories are missed (at each" in text


@pytest.mark.slow
def test_missing_corpus_snapshot_is_stated_not_fatal(copy):
    cfg_path = copy / "config_resolved.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["recommend"] = {"n_resamples": 50, "test_resamples": 100}
    cfg_path.write_text(yaml.safe_dump(cfg))
    (copy / "corpus.json.gz").unlink()
    (copy / "analysis" / "attribution.parquet").unlink()
    (copy / "failed.json").write_text(json.dumps([{"job": "job1", "reason": "BackendUnavailable: no server", "overrides": ["backend=x"]}]))
    text = report.write_report(copy, write_tables(copy)).read_text()
    assert sections(text)[0] == "Recommendation"
    assert "Not available: could not read the corpus snapshot and traces (FileNotFoundError: " in text
    assert text.split("## Why gold memories are missed")[1].split("##")[0].count("Not available: could not read the corpus snapshot") == 1
    assert not (copy / "analysis" / "attribution.parquet").exists()  # no misses table without the corpus
    assert "1 job(s) failed" in text and "BackendUnavailable: no server" in text
    assert (copy / "report.html").exists()


@pytest.mark.slow
def test_seed_claims_find_the_seed_settings_of_a_default_run(run):
    claims = (run / "report.md").read_text().split("## Claims from popular articles, measured on your data\n")[1].split("\n## ")[0]
    assert "| demo | exact | top-5 saves tokens (seekdb agent-memory article) | limit5 |" in claims
    assert "| demo | exact | similarity threshold 0.65 (quoted in articles) | threshold >= 0.65 |" in claims


@pytest.mark.slow
def test_rerun_cli(run, capsys):
    assert report_cli.main([str(run / "does-not-exist")]) == 2
    assert "summary.csv not found" in capsys.readouterr().err


def test_counts_note_explains_a_mean_that_disagrees_with_the_counts():
    from bench.report.markdown import counts_note

    # the case a user hit: hybrid5 significantly better than threshold while W/T/L was 195/1136/205
    assert counts_note({"diff": 0.012, "wins": 195, "losses": 205}) == (
        "The test is on the mean per-question difference, not on the counts: the recommendation loses more questions "
        "than it wins (195 won, 205 lost), but it wins by larger margins than it loses, so its mean is higher.")
    assert counts_note({"diff": 0.012, "wins": 205, "losses": 195}) == ""  # counts and mean agree
    assert counts_note({"diff": float("nan"), "wins": 1, "losses": 5}) == ""


@pytest.mark.slow
def test_small_categories_show_n_too_small_not_an_interval(run):
    text = (run / "report.md").read_text()
    cats = pd.read_csv(run / "analysis" / "categories.csv")
    section = text.split("## Per category")[1].split("\n## ")[0]
    assert "fewer than 10 scored questions shows `n too small`" in section
    assert "`analysis/categories.csv`" in section
    small = [ln for ln in section.splitlines() if ln.startswith("| demo") and int(ln.split(" | ")[3]) < 10]
    big = [ln for ln in section.splitlines() if ln.startswith("| demo") and int(ln.split(" | ")[3]) >= 10]
    assert small and all(ln.count("n too small") == 2 for ln in small)
    assert all("n too small" not in ln for ln in big) and (cats["n"] < 10).any()


@pytest.mark.slow
def test_one_colour_per_strategy_in_every_figure(run):
    from bench.report import plots

    st = plots.styles(["limit5", "threshold", "hybrid5", "threshold", "full_context"])
    assert list(st) == ["limit5", "threshold", "hybrid5", "full_context"]  # the run's order, duplicates once
    assert st["threshold"] == plots.styles(["limit5", "threshold"])["threshold"]  # a prefix of the same order: same style
    assert len({v["color"] for v in st.values()}) == 4 and len({v["marker"] for v in st.values()}) == 4
    pngs = sorted(p.name for p in run.rglob("*.png"))
    for stem in ("pareto_0", "tokens_vs_threshold_0", "quality_vs_threshold_0", "ci_0", "calibration_0", "loco_0"):
        assert any(p.startswith(stem) for p in pngs), stem


# --- text from data (bench.output: md_text, md_code, slug, confined) ---------------------------------------------------------------------------
HOSTILE = "x\n## Recommendation\nuse [click](https://evil.example) ![i](https://evil.example/x.png) | `c` <b>"


@pytest.mark.parametrize("value, want", [
    ("x\n## Recommendation\nuse evil", r"x \#\# Recommendation use evil"),
    ("[click](https://evil.example)", r"\[click\](https://evil.example)"),
    ("![img](https://e.x/x.png)", r"\![img\](https://e.x/x.png)"),
    ("see [a [b] c](u) qa[1]", r"see [a [b] c\](u) qa[1]"),  # brackets only where they can make a link
    ("[x]: https://evil.example", r"\[x\]: https://evil.example"),  # a link reference definition
    ("a|b `c` <d> &amp; *e*", r"a\|b \`c\` \<d> \&amp; \*e\*"),
    ("> quote", r"\> quote"),
    ("longmemeval_oracle", "longmemeval_oracle"),  # '_' between word characters cannot open emphasis: kept
    ("_e_", r"\_e\_"),
    ("- item", r"\- item"),
    ("1. item", r"1\. item"),
    ("-0.5", "-0.5"),
    ("===", r"\==="),
    ("a\u202eb\r\nc\x00d", "ab c d"),  # bidi override dropped, control characters are spaces
])
def test_md_text_hand_worked(value, want):
    from bench.output import md_text

    assert md_text(value) == want


def test_md_text_renders_as_exactly_its_characters_on_one_line():
    from markdown_it import MarkdownIt

    from bench.output import md_code, md_text

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    for text in (f"| {md_text(HOSTILE)} | {md_code(HOSTILE)} |\n|---|---|\n", f"**{md_text(HOSTILE)}**: {md_code('run:../x')}\n"):
        tokens = md.parse(text)
        kinds = {t.type for t in tokens} | {c.type for t in tokens for c in t.children or ()}
        assert not kinds & {"heading_open", "link_open", "image", "html_inline", "html_block"}, kinds
    inline = md.parseInline(md_text(HOSTILE))[0].children
    assert "".join(c.content for c in inline if c.type == "text") == " ".join(HOSTILE.split())
    assert md_code("run:../../evil") == "`run:../../evil`" and md_code("a`b") == r"a\`b"


@pytest.mark.parametrize("value, want", [("run:../../evil", "run_evil"), ("exact", "exact"), ("a b (ef=64)", "a_b_ef_64_"),
                                         ("-rf", "rf"), ("..", "x"), ("/etc/passwd", "etc_passwd"), ("名前", "x")])
def test_slug_hand_worked(value, want):
    from bench.output import slug

    assert slug(value) == want


def test_confined_refuses_a_path_outside_the_directory(tmp_path):
    from bench.output import confined

    assert confined(tmp_path, "a.png") == tmp_path / "a.png"
    with pytest.raises(ValueError, match="leaves the run directory"):
        confined(tmp_path, "x_run:../../../evil.png")


@pytest.mark.slow
def test_a_hostile_category_is_shown_as_text_in_report_md_and_html(copy):
    rows = pd.read_parquet(copy / "questions.parquet")
    rows["category"] = HOSTILE
    rows.to_parquet(copy / "questions.parquet", index=False)
    report.write_report(copy, write_tables(copy))
    md, page = (copy / "report.md").read_text(), (copy / "report.html").read_text()
    assert sections(md).count("Recommendation") == 1 and page.count("<h2>Recommendation") == 1
    assert r"x \#\# Recommendation use [click\](https://evil.example)" in md
    assert not re.search(r'(href|src)="https?:', page) and "<b>" not in page
    cats = RunDir(copy).table("categories")
    assert HOSTILE in set(cats["category"])  # the analysis table keeps the value as it is


@pytest.mark.slow
def test_main_body_is_short_and_long_tables_are_in_the_appendix(run):
    text = (run / "report.md").read_text()
    main, appendix = text.split("\n# Appendix\n")
    heads_main = sections(main)
    assert heads_main.index("Names used in this report") < heads_main.index("Pareto frontier: recall vs injected tokens")
    for name in ("Full sweep", "Best threshold by F1 per strategy", "Significance: recommendation vs every other configuration",
                 "Claims from popular articles, measured on your data", "Runs", "Dataset"):
        assert name in sections(appendix) and name not in heads_main, name
    assert "Seed" not in text and "seed articles" not in text
    legend = main.split("## Names used in this report")[1].split("\n## ")[0]
    assert "| exact | hashing-v1/" in legend  # one embedder: the short name is the store; its full identity in the legend


@pytest.mark.slow
def test_colour_means_strategy_only(run):
    """No figure picks a colour from matplotlib's cycle ("C0".."C9"): colour comes from plots.styles (strategies) or
    the neutral palette (metrics, causes, gold vs non-gold), so it never means two things."""
    from pathlib import Path

    import bench.report.answers
    import bench.report.plots

    for mod in (bench.report.plots, bench.report.answers):
        src = Path(mod.__file__).read_text()
        assert not re.search(r"""color=f?["']C\d|color=f["']C\{""", src), mod.__name__


def test_identical_stores_are_drawn_once_and_said_so(tmp_path):
    from bench.report.markdown import config_figures

    rows = []
    for be in ("exact", "sqlite_vec", "seekdb"):
        for t, rec in ((0.3, 0.9), (0.6, 0.5)):
            rows.append({"dataset": "d", "embedder": "m", "backend": be, "strategy": "threshold", "threshold": t, "precision": 0.4,
                         "recall": rec - (0.1 if be == "seekdb" else 0), "f1": 0.3, "tokens_injected_mean": 100 * rec, "tokens_full_mean": 500.0})
    lines = config_figures(tmp_path, pd.DataFrame(rows), [{"name": "threshold", "kind": "threshold"}], False)
    assert "Drawn once (identical results on every setting): sqlite_vec (= exact)." in lines  # seekdb differs: drawn
    assert (tmp_path / "quality_vs_threshold_0.png").is_file() and (tmp_path / "tokens_vs_threshold_0.png").is_file()
