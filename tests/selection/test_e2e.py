"""bench.selection.e2e: end-to-end latency per query, with the HTTP embedder against the loopback server (tests/loopback.py).

No speed is asserted: what is checked is what is measured (one request per sampled question carrying that question
alone, NaN -- never 0 -- for a question not re-embedded, the HTTP round trip inside the embed call, the sum).
"""

import json

import numpy as np
import pandas as pd
import pytest
from loopback import json_server

from bench.embedders.hashing import HashingEmbedder
from bench.embedders.http import HTTPEmbedder
from bench.replay.trace import Trace
from bench.selection import e2e
from bench.types import Conversation, Corpus, Question, Turn

TEXTS = [f"question number {i}" for i in range(6)]


class Vectors:
    def __init__(self):
        self.requests, self.base_url = [], None

    def reply(self, payload):
        data = [{"index": i, "embedding": [1.0, float(len(t)), 0.5, 0.0]} for i, t in enumerate(payload["input"])]
        return 200, {}, json.dumps({"data": data}).encode()


def test_http_embed_is_timed_one_question_per_call_with_its_round_trip():
    with json_server(Vectors()) as server:
        emb = HTTPEmbedder(model="m", base_url=server.base_url, api_key_env=None, max_retries=0, progress=False)
        embed, http = e2e.embed_times(emb, TEXTS, sample=3, seed=0)
    assert [len(r["json"]["input"]) for r in server.requests] == [1, 1, 1, 1]  # one untimed call, then one per sampled question
    sampled = np.flatnonzero(~np.isnan(embed))
    assert len(sampled) == 3 and (np.flatnonzero(~np.isnan(http)) == sampled).all()
    assert sorted(r["json"]["input"][0] for r in server.requests[1:]) == sorted(TEXTS[i] for i in sampled)
    assert (http[sampled] > 0).all() and (http[sampled] <= embed[sampled]).all()  # the round trip is part of the call


def test_a_local_embedder_has_no_http_part_and_sample_zero_measures_nothing():
    embed, http = e2e.embed_times(HashingEmbedder(dim=32), TEXTS, sample=10, seed=0)
    assert (~np.isnan(embed)).sum() == 6 and np.isnan(http).all()  # sample larger than the questions: all of them
    embed, _ = e2e.embed_times(HashingEmbedder(dim=32), TEXTS, sample=0)
    assert np.isnan(embed).all()  # not measured: NaN, never 0


def test_the_timed_calls_log_no_progress_line(caplog):
    """An embedder's own progress line (one per call, 32 per job) was inside the timed call and filled the run's log."""
    from bench.progress import progress

    class Shows(HashingEmbedder):
        def embed(self, texts):
            with progress(len(texts), "embed shows", unit="text", enabled=self.progress, tty=False) as bar:
                bar.update(len(texts))
            return super().embed(texts)

    emb = Shows(dim=8)
    emb.progress = True
    with caplog.at_level("INFO", logger="bench.progress"):
        embed, _ = e2e.embed_times(emb, TEXTS, sample=4, seed=0)
        assert (~np.isnan(embed)).sum() == 4 and not [r for r in caplog.records if r.name == "bench.progress"]
        emb.embed(["x"])  # its progress is back on afterwards
    assert len([r for r in caplog.records if r.name == "bench.progress"]) == 1 and emb.progress is True


TURNS = tuple(Turn("c1", f"t{i}", "user", "x", f"text {i}", None, i) for i in range(3))
CORPUS = Corpus("tiny", (Conversation("c1", TURNS),), (Question("q1", "c1", "?", None, ("t0",)), Question("q2", "c1", "?", None, ())))
TRACE = Trace(pd.DataFrame({"question_id": ["q1", "q2"], "latency_ns": [2_000_000, 4_000_000]}),
              {"dataset": "tiny", "embedder": "e", "backend": "exact"})


def test_the_table_adds_the_parts_and_leaves_unmeasured_queries_out():
    table = e2e.end_to_end(TRACE, CORPUS, {("limit2", None): {"q1": ("c1|t0", "c1|t1"), "q2": ()}},
                           embed_ns=np.array([5_000_000.0, np.nan]), http_ns=np.array([np.nan, np.nan]), fmt="A")
    q1, q2 = table.iloc[0], table.iloc[1]
    assert (q1["n_selected"], q2["n_selected"]) == (2, 0) and q1["format_ns"] > 0
    assert q1["e2e_ns"] == 5_000_000 + 2_000_000 + q1["format_ns"]
    assert np.isnan(q2["e2e_ns"]) and not q2["embed_measured"] and q2["store_ns"] == 4_000_000


def test_the_summary_names_the_part_that_dominates():
    rows = pd.DataFrame({"dataset": "d", "embedder": "e", "backend": "b", "strategy": "s", "threshold": np.nan, "format": "A",
                         "question_id": ["q1", "q2", "q3"], "embed_measured": [True, True, False],
                         "embed_ns": [4e6, 6e6, np.nan], "http_ns": [3e6, 5e6, np.nan], "store_ns": [1e6, 1e6, 3e6],
                         "format_ns": [0.0, 0.0, 0.0]})
    rows["e2e_ns"] = rows["embed_ns"] + rows["store_ns"] + rows["format_ns"]  # 5 ms and 7 ms
    s = e2e.summary(rows).set_index("part")
    assert set(s["dominant"]) == {"embed"}
    assert (s.loc["embed", "n"], s.loc["embed", "p50_ms"]) == (2, 5.0)
    assert (s.loc["store", "n"], s.loc["store", "p50_ms"]) == (3, 1.0)  # the store alone: every query
    assert s.loc["e2e", "p50_ms"] == 6.0 and s.loc["embed", "share_of_e2e"] == pytest.approx((4 / 5 + 6 / 7) / 2)
    assert s.loc["http", "share_of_e2e"] == pytest.approx((3 / 5 + 5 / 7) / 2)


def test_settings_and_the_nearest_threshold():
    assert e2e.check_settings(None) == (e2e.DEFAULT_SAMPLE, 0.5)
    assert e2e.pick_threshold([0.1, 0.45, 0.55], 0.5) == 0.45 and e2e.pick_threshold([0.3], 0.9) == 0.3
    with pytest.raises(ValueError, match="e2e.sample"):
        e2e.check_settings({"sample": -1})
