"""Synthetic corpus generator and its fake embedder: structure, planted gold, determinism, scale points."""

import re
import zlib

import numpy as np
import pytest

from bench.data.synthetic import START, _ts, generate, load_synthetic
from bench.embedders.synthetic import SyntheticEmbedder
from bench.types import memory_key

DAY, MIN = 86_400.0, 60.0


@pytest.fixture(scope="module")
def small():
    # 50 turns, 20 per conversation -> conversations of 20, 20, 10 turns; sessions of 5 turns.
    return generate(50, conversation_size=20, session_size=5, questions_per_conversation=3, adversarial_share=0.3, seed=1)


def test_shape_roles_and_time(small):
    assert [len(c.turns) for c in small.conversations] == [20, 20, 10]
    assert small.name == "synthetic_50" and small.source.startswith("synthetic:n=50,conversation_size=20,")
    assert len(small.questions) == 9  # 3 per conversation (none dropped: every conversation has free turns)
    c1 = small.conversations[1]
    assert [t.role for t in c1.turns[:3]] == ["user", "assistant", "user"]
    # conversation 1 starts a day after conversation 0; turn 7 = session 1, third turn of it
    assert c1.turns[0].timestamp == START + DAY
    assert c1.turns[7].timestamp == START + DAY + DAY + 2 * MIN and c1.turns[7].session == 1
    assert _ts(1, 21, 20) == START + DAY + DAY + MIN
    ts = [t.timestamp for c in small.conversations for t in c.turns]
    assert all(a < b for c in small.conversations for a, b in zip([t.timestamp for t in c.turns], [t.timestamp for t in c.turns][1:]))
    assert len(set(t.key for c in small.conversations for t in c.turns)) == 50 == len(ts)


def test_planted_gold_is_visible_marked_and_unique(small):
    turns = {t.key: t for c in small.conversations for t in c.turns}
    used = []
    for q in small.questions:
        m = re.match(r"\[topic (\d+)\]\[fact (\d+)\]", q.text)
        assert m, q.text
        if q.adversarial:
            assert q.evidence == () and q.category == "adversarial"
            assert not any(f"[fact {m.group(2)}]" in t.text for t in turns.values())  # the fact is nowhere
            continue
        assert 1 <= len(q.evidence) <= 3 and q.category == ("single-hop" if len(q.evidence) == 1 else "multi-hop")
        for ev in q.evidence:
            t = turns[memory_key(q.conversation_id, ev)]
            assert t.text.startswith(f"[topic {m.group(1)}][fact {m.group(2)}] ")  # same topic and fact as the question
            assert q.asked_at is None or t.timestamp <= q.asked_at  # said before the question was asked
            used.append(t.key)
    assert len(used) == len(set(used))  # a turn is gold for at most one question
    assert any(q.adversarial for q in small.questions) and any(q.asked_at is None for q in small.questions)


def test_deterministic_and_seeded(small):
    again = generate(50, conversation_size=20, session_size=5, questions_per_conversation=3, adversarial_share=0.3, seed=1)
    assert again == small
    other = generate(50, conversation_size=20, session_size=5, questions_per_conversation=3, adversarial_share=0.3, seed=2)
    assert other.questions != small.questions


def test_seed_scale_point_counts():
    c = load_synthetic(14_726)  # the defaults of configs/dataset/synthetic.yaml
    assert len(c.turns()) == 14_726 and len(c.conversations) == 25 and len(c.questions) == 300
    assert len(c.conversations[-1].turns) == 14_726 - 24 * 600


@pytest.mark.parametrize("field,kwargs", [
    ("n_memories", {"n_memories": 0}),
    ("conversation_size", {"conversation_size": 1}),
    ("adversarial_share", {"adversarial_share": 1.5}),
    ("seed", {"seed": -1}),
    ("topics", {"topics": "many"}),
])
def test_bad_parameters_name_the_field(field, kwargs):
    args = {"n_memories": 10, **kwargs}
    with pytest.raises(ValueError, match=f"synthetic dataset: field {field} "):
        generate(**args)


def test_embedder_clusters_gold_near_its_question(small):
    e = SyntheticEmbedder(dim=64, topics=50)
    turns = [t for c in small.conversations for t in c.turns]
    tv = e.embed_documents([t.text for t in turns])
    assert tv.dtype == np.float32 and tv.shape == (50, 64)
    np.testing.assert_allclose(np.linalg.norm(tv, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(tv, SyntheticEmbedder(dim=64, topics=50).embed_documents([t.text for t in turns]))  # deterministic
    row = {t.key: i for i, t in enumerate(turns)}
    q = next(q for q in small.questions if not q.adversarial)
    sims = tv @ e.embed_queries([q.text])[0]
    gold = [row[memory_key(q.conversation_id, ev)] for ev in q.evidence]
    others = [i for i in range(50) if i not in gold]
    assert sims[gold].min() > 0.55 and sims[gold].min() > sims[others].max()  # planted gold ranks first


def test_embedder_formula_hand_checked():
    # With noise 0 and fact weight 0 a vector is exactly its topic centre; topic = crc32 % topics without a marker.
    e = SyntheticEmbedder(dim=16, noise=0.0, fact_weight=0.0, topics=7)
    v = e.embed_documents(["[topic 3] a", "[topic 3][fact 9] b", "plain text"])
    np.testing.assert_allclose(v[0], e._centres[3], atol=1e-6)
    np.testing.assert_allclose(v[1], e._centres[3], atol=1e-6)
    np.testing.assert_allclose(v[2], e._centres[zlib.crc32(b"plain text") % 7], atol=1e-6)
    assert e.model_id == "synthetic-v1/dim16/noise0/fact0/topics7/seed0" and e.capabilities.for_results is False


def test_embedder_bad_input():
    with pytest.raises(ValueError, match="dim must be"):
        SyntheticEmbedder(dim=1)
    with pytest.raises(ValueError, match="noise must be"):
        SyntheticEmbedder(noise=-1)
    with pytest.raises(ValueError, match=r"texts\[1\] is int"):
        SyntheticEmbedder().embed(["ok", 5])


def test_hydra_configs_compose_and_agree():
    from bench.tools.perf.common import compose

    cfg = compose(["dataset=synthetic", "embedder=synthetic", "dataset.n_memories=30", "dataset.conversation_size=10"])
    assert cfg.dataset.topics == cfg.embedder.topics
    from bench.cli.config import build

    corpus, emb = build(cfg.dataset), build(cfg.embedder)
    assert len(corpus.turns()) == 30 and len(corpus.conversations) == 3
    assert emb.embed([corpus.questions[0].text]).shape == (1, 384)
