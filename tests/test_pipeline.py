"""bench.pipeline.run on plain values: a hand-made corpus, the hashing embedder, the exact store.

Each question repeats one turn word for word, so that turn is its nearest memory at cosine 1 (the hashing embedder
is deterministic, the same text gives the same unit vector) and every other turn scores well below 0.95:
  q1 = t1, gold {t1}      -> top 1 = t1: precision 1, recall 1,   F1 1
  q2 = t3, gold {t3, t4}  -> top 1 = t3: precision 1, recall 1/2, F1 2/3
so limit1 and the cut at 0.95 both score precision 1, recall 3/4, F1 5/6; limit3 (three of the four turns)
finds t3 and t4 for q2 but also two others for each.
"""

import json
from dataclasses import replace

import pytest

from bench import pipeline
from bench.data.units import UnitSpec
from bench.embedders.hashing import HashingEmbedder
from bench.results.rundir import RunDir

TURNS = [
    ("t1", "user", "I adopted a grey cat named Miso last spring."),  # gold of q1
    ("t2", "assistant", "Lovely name. How is she settling in?"),
    ("t3", "user", "I work night shifts as a nurse in Lyon."),  # gold of q2
    ("t4", "user", "Those shifts at the hospital start at seven."),  # gold of q2
]
QUESTIONS = [("q1", "I adopted a grey cat named Miso last spring.", ["t1"]),
             ("q2", "I work night shifts as a nurse in Lyon.", ["t3", "t4"])]


def limit(k: int) -> dict:
    return {"name": f"limit{k}", "fn": {"_target_": "bench.strategies.vector.limit", "_partial_": True, "k": k}}


THRESHOLD = {"name": "threshold", "fn": {"_target_": "bench.strategies.vector.threshold", "_partial_": True}}


@pytest.fixture
def job(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "turns.jsonl").write_text("".join(json.dumps({"conversation_id": "c1", "turn_id": t, "role": r, "text": x}) + "\n"
                                              for t, r, x in TURNS))
    (data / "questions.jsonl").write_text("".join(json.dumps({"question_id": q, "conversation_id": "c1", "text": x, "evidence": e}) + "\n"
                                                  for q, x, e in QUESTIONS))
    inputs = pipeline.Inputs(corpus={"_target_": "bench.data.own.load_own", "path": str(data), "name": "tiny"},
                             embedder=HashingEmbedder(dim=256), store={"_target_": "bench.backends.exact.ExactBackend"},
                             strategies=(limit(1), limit(3), THRESHOLD))
    config = {"dataset": {"path": str(data)}, "embedder": "hashing", "backend": "exact", "depth": None, "paths": {"cache": "x"}}
    settings = pipeline.Settings(cache=tmp_path / "cache", config=config, thresholds=(0.95, 0.95, 0.05), warmup=0,
                                 memory=UnitSpec(), overrides=("backend=exact",), record="# the command's config\n")
    return inputs, settings


def rows(result, strategy):
    s = result.summary
    return s[(s["strategy"] == strategy) & (s["format"] == "A")]


def test_run_scores_the_hand_worked_corpus(job, tmp_path):
    inputs, settings = job
    r = pipeline.run(inputs, settings, tmp_path / "run")
    assert r.path == tmp_path / "run" and not r.resumed and r.faults == ()
    for name in ("limit1", "threshold"):  # t1 for q1, t3 for q2: both right, half of q2's gold
        row = rows(r, name).iloc[0]
        assert (row["n_questions"], row["precision"], row["recall"]) == (2, 1.0, 0.75)
        assert row["f1"] == pytest.approx((1 + 2 / 3) / 2)
    assert rows(r, "threshold").iloc[0]["threshold"] == 0.95
    three = rows(r, "limit3").iloc[0]  # q1: 1 of 3 right, all its gold; q2: 2 of 3 right (t3, t4), all its gold
    assert (three["precision"], three["recall"]) == (pytest.approx((1 / 3 + 2 / 3) / 2), 1.0)
    out = RunDir(r.path)
    q = out.questions()
    q2 = q[(q.strategy == "limit1") & (q.question_id == "q2") & (q.format == "A")].iloc[0]
    assert (q2["n_gold"], q2["n_selected"], q2["n_correct"], q2["recall"]) == (2, 1, 1, 0.5)
    meta = out.meta()
    assert meta["caches"]["job"] == {**r.key.describe(), "status": "miss"} and meta["overrides"] == ["backend=exact"]
    assert [t["status"] for t in meta["caches"]["traces"]] == ["miss"]
    assert (r.path / "config_resolved.yaml").read_text() == "# the command's config\n"
    assert list(out.summary()["recall"]) == pytest.approx(list(r.summary["recall"]))  # the table returned is the one written


def test_an_identical_job_is_copied_and_a_new_setting_reuses_the_trace(job, tmp_path):
    inputs, settings = job
    first = pipeline.run(inputs, settings, tmp_path / "a")
    again = pipeline.run(inputs, replace(settings, overrides=("again",)), tmp_path / "b")
    assert again.resumed and again.key == first.key  # the job key ignores the overrides (a record, not a setting)
    assert RunDir(again.path).meta()["caches"]["job"]["status"] == "hit"
    assert RunDir(again.path).meta()["overrides"] == ["again"]
    assert (tmp_path / "b" / "summary.csv").read_bytes() == (tmp_path / "a" / "summary.csv").read_bytes()
    # another threshold grid decides other results (a new job key) but not the trace: no store query
    wider = pipeline.run(inputs, replace(settings, config={**settings.config, "thresholds": [0.5]}, thresholds=(0.5, 0.95, 0.45)),
                         tmp_path / "c")
    assert not wider.resumed and wider.key != first.key
    assert [t["status"] for t in RunDir(wider.path).meta()["caches"]["traces"]] == ["hit"]
    assert sorted(rows(wider, "threshold")["threshold"]) == [0.5, 0.95]
    # trace_cache=false and resume=false: measured again
    fresh = pipeline.run(inputs, replace(settings, resume=False, trace_cache=False), tmp_path / "d")
    assert not fresh.resumed and [t["status"] for t in RunDir(fresh.path).meta()["caches"]["traces"]] == ["miss"]


def test_the_job_key_is_the_settings_that_decide_results(job):
    _, settings = job
    base = pipeline.job_settings(settings.config)
    assert base == {"dataset": {"path": settings.config["dataset"]["path"]}, "embedder": "hashing", "backend": "exact", "depth": None}
    moved = {**settings.config, "paths": {"cache": "elsewhere"}, "progress": False, "resume": False, "recommend": {"x": 1}}
    assert pipeline.job_settings(moved) == base  # where it writes and how it is reported: not the job
    store = {**settings.config, "backend": {"_target_": "x", "path": "/a", "collection": "c", "ef": 8}}
    assert pipeline.job_settings(store)["backend"] == {"_target_": "x", "ef": 8}  # where the store writes: not the job


def test_a_failure_is_recorded_with_its_key_when_known(job, tmp_path):
    inputs, settings = job
    missing = replace(inputs, corpus={"_target_": "bench.data.own.load_own", "path": str(tmp_path / "nowhere")})
    with pytest.raises(FileNotFoundError):
        pipeline.run(missing, settings, tmp_path / "x")
    rec = RunDir(tmp_path / "x").failed()
    assert rec[0]["job_key"] is None and rec[0]["reason"].startswith("FileNotFoundError: ")
    assert rec[0]["backend"] == "bench.backends.exact.ExactBackend" and rec[0]["overrides"] == ["backend=exact"]
    twice = replace(inputs, strategies=(limit(1), limit(1)))  # after the key: the key is in the record
    with pytest.raises(ValueError, match="limit1 used twice"):
        pipeline.run(twice, settings, tmp_path / "y")
    assert RunDir(tmp_path / "y").failed()[0]["job_key"] is not None


# --- conventions.csv: BM25 rows beside the embedder's (bench.strategies.lexical.haystack_rankers) ---

def _bm25_corpus():
    from bench.types import Conversation, Corpus, Question, Turn

    texts = ["I adopted a dog named Rex.", "The weather is nice today.", "Rex loves the park and the beach.",
             "My cat sleeps all day.", "We walked the dog in the park."]
    turns = tuple(Turn("c", f"t{i}", "user", "u", x, None, i, i // 2) for i, x in enumerate(texts))  # sessions 0 0 1 1 2
    qs = (Question("q1", "c", "Where does Rex go to the beach?", None, ("t0", "t2"), "where"),
          Question("q2", "c", "What does the cat like?", None, ("t4",), "what"),
          Question("q_abs", "c", "How is the weather?", None, ("t1",), "what", adversarial=True))
    return Corpus("bm25tiny", (Conversation("c", turns),), qs, (), "bm25tiny.json")


def test_conventions_bm25_rows_hand_worked(tmp_path):
    from functools import partial
    from types import SimpleNamespace

    import pandas as pd

    from bench.metrics import conventions as CV
    from bench.strategies import lexical as L
    from bench.strategies.spec import StrategySpec

    corpus = _bm25_corpus()
    # BM25 (words: stopwords out): q1 "rex go beach" -> t2 (rex + beach) 1, t0 (rex) 2, then the zero-score tail in
    # conversation order t1 3, t3 4, t4 5; gold t0, t2 -> any@1 1, all@1 0, all@3 1.
    # q2 "cat like" -> t3 1, tail t0 2, t1 3, t2 4, t4 5; gold t4 at rank 5 -> any@1 0, any@3 0, any@5 1, all the same.
    # q_abs (abstention) is ranked but excluded.
    trace = SimpleNamespace(table=pd.DataFrame({"question_id": ["q1", "q2", "q_abs"],
                                                "hit_ids": [["c|t0", "c|t2"], ["c|t4"], ["c|t1"]]}), meta={"backend": "exact", "roles": None})
    bm25 = StrategySpec("bm25_5", partial(L.bm25, k=5, k1=1.5, b=0.75), thresholded=False, uses_store=False)
    keyword = StrategySpec("keyword5", partial(L.keyword, k=5), thresholded=False, uses_store=False)
    settings = pipeline.Settings(cache=tmp_path, conventions_ks=(1, 3, 5), memory=UnitSpec())
    path = pipeline.write_conventions(settings, [trace], corpus, SimpleNamespace(model_id="e", identity={"max_length": 128}),
                                      tmp_path, (bm25, keyword, replace(bm25, name="bm25_10")))
    df = pd.read_csv(path)
    assert list(df.columns) == CV.COLUMNS
    assert list(dict.fromkeys(df["system"])) == ["e", "bm25 (rank-bm25 Okapi k1=1.5 b=0.75)"]  # keyword: no ranking; bm25 once
    b = df[df["system"] == "bm25 (rank-bm25 Okapi k1=1.5 b=0.75)"]
    assert set(b["embedder"]) == {"none"} and b["max_length"].isna().all() and set(b["roles"]) == {"all"}
    get = b[b["question_type"] == "overall"].set_index(["level", "metric", "k"])["mean"]
    assert [get["turn", "recall_any", k] for k in (1, 3, 5)] == [0.5, 0.5, 1.0]
    assert [get["turn", "recall_all", k] for k in (1, 3, 5)] == [0.0, 0.5, 1.0]
    # session level (t2 -> s1, t0 -> s0, ...): q1 gold {s0, s1}; top 1 session = s1 -> any 1, all 0; q2 gold {s2}: the
    # sessions ranked s1 s0 s0 s1 s2 -> k=1: s1; k=3 -> k'=5 (3 distinct sessions only at rank 5) -> s2 in: any 1
    assert get["session", "recall_any", 1] == 0.5 and get["session", "recall_any", 3] == 1.0
    assert set(b["n_questions"]) == {1, 2} and set(b["n_abstention_excluded"]) == {1}  # per type 1, overall 2; q_abs out
    # the embedder's rows are the trace's: q1 both gold in the top 2, q2 its gold first
    e = df[(df["system"] == "e") & (df["question_type"] == "overall")].set_index(["level", "metric", "k"])["mean"]
    assert e["turn", "recall_all", 3] == 1.0 and e["turn", "recall_any", 1] == 1.0
    ranked = json.loads((tmp_path / "rankings" / "bm25.json").read_text())  # LongMemEval JSON, for `recallbench score`
    assert ranked == {"q1": ["c|t2", "c|t0", "c|t1", "c|t3", "c|t4"], "q2": ["c|t3", "c|t0", "c|t1", "c|t2", "c|t4"],
                      "q_abs": ["c|t1", "c|t0", "c|t2", "c|t3", "c|t4"]}  # "weather" only in t1, then the tail


def test_run_writes_bm25_conventions_rows(job):
    inputs, settings = job
    bm25 = {"name": "bm25_5", "fn": {"_target_": "bench.strategies.lexical.bm25", "_partial_": True, "k": 5, "k1": 1.5, "b": 0.75}}
    result = pipeline.run(replace(inputs, strategies=(limit(1), bm25)), settings, settings.cache.parent / "out_bm25")
    import pandas as pd

    df = pd.read_csv(result.path / "conventions.csv")
    assert list(dict.fromkeys(df["system"]))[1:] == ["bm25 (rank-bm25 Okapi k1=1.5 b=0.75)"]  # after the embedder's
    b = df[(df["system"].str.startswith("bm25")) & (df["question_type"] == "overall") & (df["level"] == "turn")].set_index(["metric", "k"])
    # q1's text is its gold turn's: BM25 ranks it first. q2's is t3's: t3 first; t4 shares only "shifts", in 2 of the 4
    # texts: Okapi idf log((4 - 2 + 0.5) / (2 + 0.5)) = 0, so t4 scores 0 and comes in the tail in conversation order
    # (t1, t2, t4): rank 4 -> q2 all@3 0, all@5 1
    assert b.loc[("recall_any", 1), "mean"] == 1.0 and b.loc[("recall_all", 1), "mean"] == 0.5
    assert b.loc[("recall_all", 3), "mean"] == 0.5 and b.loc[("recall_all", 5), "mean"] == 1.0
    assert set(df["n_questions"]) <= {0, 1, 2}


def test_bm25_conventions_on_the_longmemeval_s_slice(tmp_path):
    """The 20-question _s slice, session units of user turns: BM25 ranks each haystack whole, the rows exclude the
    abstention and no-gold questions, its JSON reads back through `recallbench score`'s reader and scores the same
    recall_any/recall_all there (bench.metrics.ranked), and the report shows it beside the embedder's rows."""
    from functools import partial
    from pathlib import Path
    from types import SimpleNamespace

    import pandas as pd

    from bench.analysis.systems import ranking_rows
    from bench.data.longmemeval import load_longmemeval
    from bench.metrics import conventions as CV
    from bench.replay.rankings import read_ranking
    from bench.replay.visibility import Visibility
    from bench.report.conventions import section
    from bench.strategies import lexical as L
    from bench.strategies.spec import StrategySpec

    spec = UnitSpec("session", "user")
    from bench.data.units import apply_units

    corpus = apply_units(load_longmemeval(path=Path(__file__).parent / "fixtures" / "data" / "lme_s_slice", name="slice"), spec)
    trace = SimpleNamespace(table=pd.DataFrame({"question_id": [q.question_id for q in corpus.questions],
                                                "hit_ids": [[] for _ in corpus.questions]}), meta={"backend": "exact"})
    bm25 = StrategySpec("bm25_5", partial(L.bm25, k=5), thresholded=False, uses_store=False)
    pipeline.write_conventions(pipeline.Settings(cache=tmp_path, memory=spec), [trace], corpus,
                               SimpleNamespace(model_id="e", identity={"max_length": 256}), tmp_path, (bm25,))
    df = pd.read_csv(tmp_path / CV.FILE)
    b = df[(df["system"] == "bm25 (rank-bm25 Okapi k1=1.5 b=0.75)") & (df["question_type"] == "overall")]
    assert set(b["level"]) == {"session"} and set(b["n_questions"]) == {15}  # 20 - 2 abstention - 3 without user gold
    assert set(b["n_abstention_excluded"]) == {2} and set(b["n_without_gold_excluded"]) == {3}
    # whole haystacks (3-5 sessions each in the slice) ranked: every visible gold is in the top 50; 0bb5a684 sees 1 of its
    # 4 sessions at its question_date, 1 of its 2 gold sessions later: a miss for recall_all (as for every system)
    assert b.set_index(["metric", "k"]).loc[("recall_any", 50), "mean"] == 1.0
    assert b.set_index(["metric", "k"]).loc[("recall_all", 50), "mean"] == pytest.approx(14 / 15)
    ranked = json.loads((tmp_path / "rankings" / "bm25.json").read_text())
    vis = Visibility(corpus)
    assert all(sorted(ranked[q.question_id]) == sorted(vis.visible_keys(q).tolist()) for q in corpus.questions)  # permutations
    assert len(ranked["0bb5a684"]) == 1
    rows = ranking_rows(read_ranking(tmp_path / "rankings" / "bm25.json", corpus, unit="session"), corpus, ks=(1, 5, 10))
    assert len(rows) == 15
    mean = b.set_index(["metric", "k"])["mean"]
    for m in ("recall_any", "recall_all"):
        for k in (1, 5, 10):
            assert rows[f"session/{m}@{k}"].mean() == pytest.approx(mean[m, k], abs=1e-12)
    (tmp_path / "meta.json").write_text("{}")
    (tmp_path / "summary.csv").write_text("x\n1\n")
    text = "\n".join(section(RunDir(tmp_path)))
    assert "ranker `bm25 (rank-bm25 Okapi k1=1.5 b=0.75)` (no embedder; truncation none" in text
    assert "embedder `e` (truncation 256 tokens)" in text
    assert "| `e` | `exact` | 15 | 0.000 |" in text and "systems side by side" in text  # the empty trace's row, then BM25's
    assert f"| `bm25 (rank-bm25 Okapi k1=1.5 b=0.75)` | `none (ranked over the memories each question may see)` | 15 | " \
           f"{mean['recall_any', 5]:.3f} |" in text


def test_a_ratio_strategy_under_a_native_score_and_faults_on_a_run_file_stop_in_one_line(job, tmp_path):
    """relative_ratio's alpha x the best score means nothing once thresholds compare with a distance (or 2c - 1): the job
    stops before any work; injected faults wrap a store's search, so a run_file (a given ranking) refuses them."""
    from dataclasses import replace

    inputs, settings = job
    ratio = {"name": "relative_ratio", "fn": {"_target_": "bench.strategies.relative.relative_ratio", "_partial_": True}}
    with pytest.raises(ValueError, match="score=native: relative_ratio compare"):
        pipeline.prepare(replace(inputs, strategies=(limit(1), ratio)), replace(settings, score="native"))
    assert pipeline.prepare(replace(inputs, strategies=(limit(1), ratio)), settings).strategies[1].name == "relative_ratio"
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"q1": ["c1|t1"], "q2": ["c1|t3"]}))
    with pytest.raises(ValueError, match="faults: injected faults wrap a store's search, not a run_file"):
        pipeline.run(inputs, replace(settings, run_file=str(run), faults={"error_rate": 0.5, "seed": 0}), tmp_path / "out")


def test_the_answer_index_is_built_once_per_job_for_every_trace(job, tmp_path, monkeypatch):
    """Two role filters give two traces and two sweeps; the corpus's answer index (every text tokenised) is built once
    and the sweeps read it."""
    from bench.metrics.answers import AnswerIndex

    built = []
    real = AnswerIndex.build
    monkeypatch.setattr(AnswerIndex, "build", staticmethod(lambda corpus: built.append(corpus.name) or real(corpus)))
    inputs, settings = job
    users = {**limit(1), "name": "limit1_user", "roles": ["user"]}
    r = pipeline.run(replace(inputs, strategies=(limit(1), users)), settings, tmp_path / "run")
    assert built == ["tiny"] and len(RunDir(r.path).meta()["caches"]["traces"]) == 2
    assert rows(r, "limit1_user").iloc[0]["n_questions"] == 2  # (before: one build per sweep, two here)
    cached = list((settings.cache / "answers").glob("*.npz"))
    assert len(cached) == 1 and cached[0].name.startswith(r.key.inputs["corpus_sha256"][:16])
    pipeline.run(replace(inputs, strategies=(limit(1), users)), replace(settings, resume=False), tmp_path / "again")
    assert built == ["tiny"]  # read from the cache
    cached[0].write_bytes(b"not an npz")
    pipeline.run(replace(inputs, strategies=(limit(1), users)), replace(settings, resume=False), tmp_path / "third")
    assert built == ["tiny", "tiny"] and cached[0].read_bytes()[:2] == b"PK"  # an unreadable cache: built and written again


def test_the_token_table_is_read_back_from_its_cache(job, tmp_path, monkeypatch):
    """The second run prices every format from the cached table (nothing counted) with the same numbers; an unreadable
    table is counted again and rewritten."""
    from bench.data import tokens

    inputs, settings = job
    first = pipeline.run(inputs, settings, tmp_path / "a")
    tables = list((settings.cache / "tokens").glob("table-*.npz"))
    assert len(tables) == 1 and tables[0].name.startswith("table-cl100k_base-")
    counted = []
    real = tokens.count_tokens_many
    monkeypatch.setattr(tokens, "count_tokens_many", lambda texts, encoding="cl100k_base": counted.append(len(texts)) or real(texts, encoding))
    tables[0].unlink()
    (settings.cache / "tokens").joinpath(tables[0].name).write_bytes(b"not an npz")
    pipeline.run(inputs, replace(settings, resume=False), tmp_path / "b")  # the JSON counts answer every call: nothing tokenised
    assert counted == [] and tables[0].read_bytes()[:2] == b"PK"  # rebuilt from the counts, rewritten
    for p in (settings.cache / "tokens").glob("*.json"):
        p.unlink()  # only the table is left: it alone must price the run
    again = pipeline.run(inputs, replace(settings, resume=False), tmp_path / "c")
    assert counted == []
    cols = ["strategy", "format", "tokens_injected_mean", "tokens_full_mean"]
    assert again.summary[cols].equals(first.summary[cols])
    assert set(again.summary["format"]) == {"A"} and RunDir(again.path).meta()["format_tokens"] == RunDir(first.path).meta()["format_tokens"]
