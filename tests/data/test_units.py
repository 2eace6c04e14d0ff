"""Memory units (LoCoMo observations, session summaries): units, pointers, gold mapped through them."""

import json
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bench.data.locomo_units import load_locomo_units, unit_pointers

REPO = Path(__file__).resolve().parents[2]

DATA = [{
    "sample_id": "conv-1",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice, I have one too."},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "His name is Rex."},
        ],
        "session_2_date_time": "10:00 am on 9 May, 2023",
        "session_2": [
            {"speaker": "Bob", "dia_id": "D2:1", "text": "How is Rex?"},
            {"speaker": "Ann", "dia_id": "D2:2", "text": "He loves the park."},
        ],
    },
    "observation": {
        "session_1_observation": {
            "Ann": [["Ann adopted a dog.", "D1:1"], ["Ann's dog is Rex.", ["D1:3", "D1:1"]]],   # O1:1, O1:2
            "Bob": [["Bob has a dog.", "D1:2"]],                                                # O1:3
        },
        "session_2_observation": {
            "Ann": [["Rex loves the park.", "D2:2, D2:9"],   # O2:1; D2:9 does not exist -> dropped
                    ["Orphan fact.", "X"]],                   # O2:2; unparseable pointer -> never gold
            "Carl": [["Who is Carl?", "D2:1"]],               # unknown speaker -> skipped
        },
    },
    "session_summary": {"session_1_summary": "Ann adopted Rex; Bob has a dog.", "session_2_summary": "Rex loves the park."},
    "qa": [
        {"question": "What is the dog's name?", "answer": "Rex", "evidence": ["D1:3"], "category": 4},
        {"question": "Where does Rex play?", "answer": "park", "evidence": ["D2:2"], "category": 4},
        {"question": "How is Rex?", "answer": "fine", "evidence": ["D2:1"], "category": 4},
        {"question": "What did Bob adopt?", "adversarial_answer": "a cat", "evidence": ["D1:1"], "category": 5},
    ],
}]


@pytest.fixture()
def path(tmp_path):
    p = tmp_path / "locomo10.json"
    p.write_text(json.dumps(DATA))
    return p


def test_observations_are_units_with_gold_through_pointers(path):
    c = load_locomo_units(path=path, unit="observation")
    assert c.name == "locomo_observations" and c.source == str(path)
    units = c.conversations[0].turns
    assert [(u.turn_id, u.role, u.speaker, u.session, u.position) for u in units] == [
        ("O1:1", "user", "Ann", 0, 0), ("O1:2", "user", "Ann", 0, 1), ("O1:3", "assistant", "Bob", 0, 2),
        ("O2:1", "user", "Ann", 1, 3), ("O2:2", "user", "Ann", 1, 4)]
    assert units[0].text == "Ann adopted a dog." and units[0].timestamp == 1683554160.0  # the session date
    gold = {q.question_id: q.evidence for q in c.questions}
    assert gold == {"conv-1/q0": ("O1:2",), "conv-1/q1": ("O2:1",), "conv-1/q2": (), "conv-1/q3": ("O1:1", "O1:2")}
    assert [q.adversarial for q in c.questions] == [False, False, False, True]
    kinds = Counter(d.kind for d in c.defects)
    assert kinds == {"unit_pointer_not_found": 1, "unit_pointer_unparseable": 1, "unit_without_pointer": 1,
                     "unit_speaker_unknown": 1, "question_gold_not_covered": 1,
                     "adversarial_with_gold": 1}  # LoCoMo's own defect for q3 (category 5 with evidence), kept
    assert next(d for d in c.defects if d.kind == "unit_pointer_not_found").record == "conv-1/observation/session_2_observation/Ann[0]"


def test_pointers(path):
    p = unit_pointers(path=path, unit="observation")
    assert p == {"conv-1|O1:1": ("D1:1",), "conv-1|O1:2": ("D1:3", "D1:1"), "conv-1|O1:3": ("D1:2",),
                 "conv-1|O2:1": ("D2:2",), "conv-1|O2:2": ()}
    assert unit_pointers(path=path, unit="summary") == {"conv-1|S1": ("D1:1", "D1:2", "D1:3"), "conv-1|S2": ("D2:1", "D2:2")}


def test_summaries_are_session_level_units(path):
    c = load_locomo_units(path=path, unit="summary")
    assert c.name == "locomo_summaries"
    assert [(u.turn_id, u.text, u.session) for u in c.turns()] == [("S1", "Ann adopted Rex; Bob has a dog.", 0), ("S2", "Rex loves the park.", 1)]
    assert [q.evidence for q in c.questions] == [("S1",), ("S2",), ("S2",), ("S1",)]
    assert not [d for d in c.defects if d.kind.startswith(("unit_", "question_gold"))]


def test_bad_input_names_file_record_and_field(path, tmp_path):
    with pytest.raises(ValueError, match="unit must be one of observation, summary"):
        load_locomo_units(path=path, unit="event")
    bad = json.loads(json.dumps(DATA))
    del bad[0]["session_summary"]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"bad.json: record conv-1: field 'session_summary' must be an object"):
        load_locomo_units(path=p, unit="summary")
    bad = json.loads(json.dumps(DATA))
    bad[0]["observation"]["session_1_observation"]["Ann"][0] = "just text"
    p.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"record conv-1/observation/session_1_observation/Ann\[0\]: expected \[fact, dia_id\]"):
        load_locomo_units(path=p, unit="observation")


@pytest.mark.parametrize("config, name", [("locomo_observations", "locomo_observations"), ("locomo_summaries", "locomo_summaries")])
def test_hydra_configs(path, config, name):
    from hydra.utils import instantiate

    (path.parent / "locomo").mkdir()
    (path.parent / "locomo" / "locomo10.json").write_text(path.read_text())
    cfg = OmegaConf.create({"paths": {"datasets": str(path.parent)},
                            "dataset": OmegaConf.load(REPO / "configs" / "dataset" / f"{config}.yaml")})
    c = instantiate(cfg.dataset)
    assert c.name == name and len(c.questions) == 4


def test_real_locomo_units(bench_data_dir):
    p = bench_data_dir / "locomo" / "locomo10.json"
    if not p.is_file():
        pytest.skip(f"{p} absent (set BENCH_DATA_DIR to the directory holding locomo/locomo10.json)")
    obs = load_locomo_units(path=p, unit="observation")
    main = [q for q in obs.questions if not q.adversarial]
    assert len(obs.turns()) == 2541 and len(main) == 1540
    assert sum(1 for q in main if q.evidence) == 1312  # 224 questions' gold turns have no observation
    assert Counter(d.kind for d in obs.defects)["question_gold_not_covered"] == 224
    summ = load_locomo_units(path=p, unit="summary")
    assert len(summ.turns()) == 272
    assert sum(1 for q in summ.questions if not q.adversarial and q.evidence) == 1536  # 4 questions have no gold at all
