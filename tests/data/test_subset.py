"""bench.data.subset: a corpus cut to named conversations, and the CI dataset (LoCoMo subset or demo)."""

import shutil
from pathlib import Path

import pytest
from conftest import data_dir

from bench.data.subset import load_ci_subset, subset
from bench.types import Conversation, Corpus, Defect, Question, Turn

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "datasets" / "demo"


def _corpus() -> Corpus:
    def turns(cid, n):
        return tuple(Turn(cid, f"t{i}", "user", "u", f"{cid} text {i}", None, i) for i in range(n))

    convs = (Conversation("a", turns("a", 2)), Conversation("b", turns("b", 3)), Conversation("c", turns("c", 1)))
    qs = (Question("qa", "a", "?", None, ("t0",)), Question("qb1", "b", "?", None, ("t1",)),
          Question("qb2", "b", "?", None, ("t2",)), Question("qc", "c", "?", None, ("t0",)))
    defects = (Defect("f.json", "b/qa[0]", "evidence[0]", "k", "'x'", "dropped"), Defect("f.json", "a", "session_2", "k", "'y'", "skipped"))
    return Corpus("full", convs, qs, defects, source="f.json")


def test_subset_keeps_named_conversations_in_given_order_with_their_questions_and_defects():
    s = subset(_corpus(), ["c", "b"], name="ci")
    assert s.name == "ci"
    assert [c.conversation_id for c in s.conversations] == ["c", "b"]
    assert len(s.turns()) == 4  # 1 + 3
    assert [q.question_id for q in s.questions] == ["qb1", "qb2", "qc"]  # corpus order
    assert [d.record for d in s.defects] == ["b/qa[0]"]
    assert s.source == "f.json (conversations c, b)"


def test_subset_errors_name_the_source_and_the_conversation():
    with pytest.raises(ValueError, match=r"f\.json: subset 'ci': no conversation 'zz' \(the file has a, b, c\)"):
        subset(_corpus(), ["a", "zz"], name="ci")
    with pytest.raises(ValueError, match="names a conversation twice"):
        subset(_corpus(), ["a", "a"], name="ci")
    with pytest.raises(ValueError, match="names no conversation"):
        subset(_corpus(), [], name="ci")


def test_ci_subset_falls_back_to_the_demo_corpus_without_locomo(tmp_path):
    c = load_ci_subset(datasets_dir=tmp_path, demo_dir=DEMO, conversations=["conv-26"])
    assert c.name == "demo" and len(c.questions) == 25 and len(c.turns()) == 163


def test_ci_subset_is_two_locomo_conversations_when_locomo_is_there():
    path = data_dir() / "locomo" / "locomo10.json"
    if not path.is_file():
        pytest.skip(f"LoCoMo not at {path} (set BENCH_DATA_DIR)")
    c = load_ci_subset(datasets_dir=data_dir(), demo_dir=DEMO, conversations=["conv-26", "conv-30"])
    assert c.name == "locomo_ci"
    assert [x.conversation_id for x in c.conversations] == ["conv-26", "conv-30"]
    assert len(c.turns()) == 419 + 369 and len(c.questions) == 199 + 105
    assert sum(not q.adversarial for q in c.questions) == 152 + 81
    assert {q.conversation_id for q in c.questions} == {"conv-26", "conv-30"}
    forced = load_ci_subset(datasets_dir=data_dir(), demo_dir=DEMO, conversations=["conv-26"], force_demo=True)
    assert forced.name == "demo"


def test_the_locomo_ci_hydra_config_cuts_the_file_it_finds(tmp_path):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    import bench.cli.config  # noqa: F401  (registers the rb.* resolvers the configs use)

    (tmp_path / "locomo").mkdir()
    shutil.copyfile(REPO / "tests" / "fixtures" / "data" / "locomo_tiny.json", tmp_path / "locomo" / "locomo10.json")
    node = OmegaConf.load(REPO / "configs" / "dataset" / "locomo_ci.yaml")
    cfg = OmegaConf.create({"paths": {"datasets": str(tmp_path), "root": str(REPO)}, "dataset": node})
    cfg.dataset.conversations = ["conv-2"]
    c = instantiate(cfg.dataset)
    assert c.name == "locomo_ci" and [x.conversation_id for x in c.conversations] == ["conv-2"]
    assert [q.question_id for q in c.questions] == ["conv-2/q0"] and len(c.turns()) == 2
    assert c.defects == ()  # the tiny file's defects are all in conv-1
    cfg.dataset.force_demo = True
    assert instantiate(cfg.dataset).name == "demo"
    assert list(OmegaConf.load(REPO / "configs" / "dataset" / "locomo_ci.yaml").conversations) == ["conv-26", "conv-30"]
