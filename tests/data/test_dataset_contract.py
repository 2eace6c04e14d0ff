"""The corpus contract, checked for EVERY configs/dataset/*.yaml (found by glob: a new dataset is picked up).

Each YAML is composed as ``recallbench sweep dataset=<name>`` composes it (``paths.datasets`` from BENCH_DATA_DIR)
and built by its ``_target_`` loader. A corpus not present under BENCH_DATA_DIR skips with the loader's one line.
Kept small: LongMemEval_S is read from a folder of its first FILES_S question files (never all 498), the synthetic
corpus at SYNTHETIC_SIZE memories, ``own`` (no default path) on the shipped demo corpus.

Checks: a Corpus with a name (the YAML's when it sets one); unique conversation ids; turns that belong to their
conversation, with unique ids, positions 0..n-1 in order, known roles, string texts, finite or unknown times and
sessions that never go back; questions with unique ids in a known conversation whose evidence are turns of it,
at least one with evidence; the same corpus from a second load; and, for a YAML that reads one ``path``, the
same corpus from ``bench.data.load_corpus(<name>, path)`` (the kind registry is read from these YAMLs).
"""

from __future__ import annotations

import math

import pytest

from omegaconf import OmegaConf

from bench.cli.config import compose, to_plain
from bench.data import kinds, load_corpus
from bench.plugins import instantiate
from bench.resources import demo_dir, plugin_names
from bench.types import ROLES, Corpus
from conftest import data_dir

CONFIGS = plugin_names("dataset")  # configs/dataset/*.yaml
FILES_S = 3
SYNTHETIC_SIZE = 600


def overrides(name: str, tmp_path_factory) -> dict:
    """What keeps each dataset small and offline (see the module docstring)."""
    if name == "own":
        return {"path": str(demo_dir())}
    if name == "synthetic":
        return {"n_memories": SYNTHETIC_SIZE, "conversation_size": 200}
    if name == "longmemeval_s":
        src = data_dir() / "longmemeval_s" / "lme_jsons_s"
        files = sorted(src.glob("*.json"))[:FILES_S] if src.is_dir() else []
        if not files:
            pytest.skip(f"longmemeval_s: no {src} (set BENCH_DATA_DIR to the folder holding longmemeval_s/)")
        subset = tmp_path_factory.mktemp("lme_s")
        for f in files:
            (subset / f.name).symlink_to(f)
        return {"path": str(subset)}
    return {}


@pytest.fixture(scope="module", params=CONFIGS)
def loaded(request, tmp_path_factory):
    """(name, the YAML's plain node as composed and kept small, the corpus it builds)."""
    name = request.param
    mp = pytest.MonkeyPatch()
    mp.setenv("BENCH_DATA_DIR", str(data_dir()))
    try:
        node = to_plain(OmegaConf.merge(compose([f"dataset={name}"]).dataset, overrides(name, tmp_path_factory)))
    finally:
        mp.undo()
    try:
        corpus = instantiate(node)
    except FileNotFoundError as e:
        pytest.skip(f"{name}: {str(e).splitlines()[0]}")
    return name, node, corpus


def test_is_a_well_formed_corpus(loaded):
    name, node, corpus = loaded
    assert isinstance(corpus, Corpus), f"{name}: loader returned {type(corpus).__name__}"
    assert isinstance(corpus.name, str) and corpus.name, name
    if isinstance(node.get("name"), str) and name not in ("locomo_ci", "auto"):  # those two fall back to the demo
        assert corpus.name == node["name"], f"{name}: corpus named {corpus.name!r}, YAML says {node['name']!r}"
    assert corpus.conversations, f"{name}: no conversations"
    conv_ids = [c.conversation_id for c in corpus.conversations]
    assert len(set(conv_ids)) == len(conv_ids) and all(type(c) is str for c in conv_ids), f"{name}: conversation ids"
    turn_ids = {}
    for c in corpus.conversations:
        ids = [t.turn_id for t in c.turns]
        assert len(set(ids)) == len(ids) and all(type(i) is str for i in ids), f"{name}/{c.conversation_id}: turn ids not unique strings"
        assert [t.position for t in c.turns] == list(range(len(c.turns))), f"{name}/{c.conversation_id}: positions"
        assert all(t.conversation_id == c.conversation_id for t in c.turns), f"{name}/{c.conversation_id}: a turn of another conversation"
        assert all(t.role in ROLES and isinstance(t.text, str) for t in c.turns), f"{name}/{c.conversation_id}: role or text"
        assert all(t.timestamp is None or math.isfinite(t.timestamp) for t in c.turns), f"{name}/{c.conversation_id}: timestamp"
        sessions = [t.session for t in c.turns]
        assert sessions == sorted(sessions), f"{name}/{c.conversation_id}: sessions go back"
        turn_ids[c.conversation_id] = set(ids)
    q_ids = [q.question_id for q in corpus.questions]
    assert q_ids and len(set(q_ids)) == len(q_ids) and all(type(i) is str for i in q_ids), f"{name}: question ids"
    for q in corpus.questions:
        assert q.conversation_id in turn_ids, f"{name}/{q.question_id}: unknown conversation {q.conversation_id!r}"
        stray = set(q.evidence) - turn_ids[q.conversation_id]
        assert not stray, f"{name}/{q.question_id}: evidence {sorted(stray)} are not turns of {q.conversation_id}"
    assert any(q.evidence for q in corpus.questions), f"{name}: no question has evidence"


def test_loads_the_same_corpus_twice(loaded):
    name, node, corpus = loaded
    assert instantiate(node) == corpus, f"{name}: a second load differs"


def test_a_path_kind_loads_the_same_through_the_registry(loaded):
    """``bench.data.kinds`` is read from these YAMLs: ``load_corpus(<name>, path)`` is the YAML's loader with its settings."""
    name, node, corpus = loaded
    if "path" not in node:
        pytest.skip(f"{name}: reads no single path (not a corpus kind)")
    assert name in kinds()
    assert load_corpus(name, node["path"]) == corpus


def test_the_kind_registry_is_read_from_the_yamls():
    """Hand-checked: every YAML with a path is a kind of its name, and each loader module is one with its defaults."""
    k = kinds()
    assert {"locomo", "locomo_2025", "locomo_observations", "locomo_summaries", "longmemeval_oracle", "longmemeval_s", "own"} <= set(k)
    assert {"longmemeval", "locomo_units"} <= set(k)  # loader modules: what detect_kind answers
    assert not {"auto", "locomo_ci", "synthetic"} & set(k)  # no single path: not kinds
    assert (k["locomo_2025"].target, dict(k["locomo_2025"].settings)) == (
        "bench.data.locomo.load_locomo", {"name": "locomo_2025", "roles": {"speaker_a": "user", "speaker_b": "assistant"}})
    assert (k["longmemeval"].target, dict(k["longmemeval"].settings)) == ("bench.data.longmemeval.load_longmemeval", {})
    assert dict(k["own"].settings) == {"name": None}
