"""LoCoMo loader: a hand-made fixture with every known defect, the Hydra configs, and the real files."""

from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bench.data.locomo import load_locomo, normalise_dia_id, parse_locomo_date
from bench.types import Defect, Turn

FIX = Path(__file__).parents[1] / "fixtures" / "data" / "locomo_tiny.json"
REPO = Path(__file__).resolve().parents[2]
F = str(FIX)

MAY8_1356 = 1683554160.0  # 2023-05-08 13:56 UTC  ("1:56 pm on 8 May, 2023")
MAY9_0005 = 1683590700.0  # 2023-05-09 00:05 UTC  ("12:05 am on 9 May, 2023")
JAN1_0900 = 1704099600.0  # 2024-01-01 09:00 UTC  ("9:00 am on 1 January, 2024")


@pytest.fixture(scope="module")
def corpus():
    return load_locomo(path=FIX)


def test_dates():
    assert parse_locomo_date("1:56 pm on 8 May, 2023") == MAY8_1356
    assert parse_locomo_date("12:05 am on 9 May, 2023") == MAY9_0005
    assert parse_locomo_date("12:30 pm on 1 January, 2024") == JAN1_0900 + 3.5 * 3600  # 12 pm is noon
    with pytest.raises(ValueError, match="unparseable"):
        parse_locomo_date("yesterday")


def test_normalise_dia_id():
    assert normalise_dia_id("D3:7") == ("D3:7", "ok")
    assert normalise_dia_id("D30:05") == ("D30:5", "zero_padded")
    assert normalise_dia_id("D:11:26") == ("D11:26", "malformed")
    assert normalise_dia_id("D") == (None, "unparseable")


def test_turns(corpus):
    assert [c.conversation_id for c in corpus.conversations] == ["conv-1", "conv-2"]
    assert corpus.conversations[0].turns == (
        Turn("conv-1", "D1:1", "user", "Ann", "Hi Bob, I adopted a dog.", MAY8_1356, 0, 0),
        Turn("conv-1", "D1:2", "assistant", "Bob", "Nice! Here is mine. [shares a photo: a brown dog on a beach]",
             MAY8_1356, 1, 0),
        Turn("conv-1", "D1:3", "user", "Ann", "His name is Rex.", MAY8_1356, 2, 0),
        Turn("conv-1", "D2:1", "assistant", "Bob", "How is Rex?", MAY9_0005, 3, 1),
        Turn("conv-1", "D2:2", "user", "Ann", "He loves the park.", MAY9_0005, 4, 1),
    )
    assert corpus.conversations[1].turns[1] == Turn(
        "conv-2", "D1:2", "assistant", "Dan", "Happy new year! I start my new job today.", JAN1_0900, 1, 0)
    assert corpus.name == "locomo" and corpus.source == F


def test_roles_are_configurable():
    c = load_locomo(path=FIX, roles={"speaker_a": "assistant", "speaker_b": "user"})
    assert [(t.speaker, t.role) for t in c.conversations[1].turns] == [("Cara", "assistant"), ("Dan", "user")]
    with pytest.raises(ValueError, match="roles must map speaker_a and speaker_b"):
        load_locomo(path=FIX, roles={"speaker_a": "user", "speaker_b": "bot"})


def test_questions_and_normalised_evidence(corpus):
    got = {q.question_id: q.evidence for q in corpus.questions}
    assert got == {
        "conv-1/q0": ("D1:3",),                  # ["D1:3", "D1:3"]: de-duplicated
        "conv-1/q1": ("D1:1", "D2:2"),           # "D1:1; D2:2": split
        "conv-1/q2": ("D1:2", "D2:1", "D1:1"),   # "D1:2 D2:1 D1:1": split, order kept
        "conv-1/q3": ("D2:1",),                  # "D2:01": zero padding removed
        "conv-1/q4": ("D1:3",),                  # "D:1:3": malformed but the turn exists
        "conv-1/q5": ("D1:1",),                  # "D:9:9" has no turn: dropped
        "conv-1/q6": (),                         # bare "D": dropped -> no gold
        "conv-1/q7": ("D2:2",),                  # "D1:4" is past the end of session 1: dropped
        "conv-1/q8": ("D1:1",),                  # adversarial keeps its evidence (reported, never scored)
        "conv-1/q9": (),                         # no evidence in the file
        "conv-2/q0": ("D1:2",),
    }
    q = {q.question_id: q for q in corpus.questions}
    assert [q[f"conv-1/q{i}"].category for i in range(10)] == [
        "single-hop", "multi-hop", "multi-hop", "temporal", "single-hop", "single-hop", "open-domain",
        "single-hop", "adversarial", "open-domain"]
    assert [x.question_id for x in corpus.questions if x.adversarial] == ["conv-1/q8"]
    assert q["conv-1/q3"].answer == "2023"      # int in the file
    assert q["conv-1/q8"].answer == "a cat"     # only adversarial_answer
    assert q["conv-1/q0"].text == "What is the dog's name?"
    assert all(x.asked_at is None and x.conversation_id == x.question_id.split("/")[0] for x in corpus.questions)


def test_every_defect_is_reported(corpus):
    assert list(corpus.defects) == [
        Defect(F, "conv-1", "session_3", "session_without_turns", "'10:04 am on 19 December, 2023'",
               "skipped (date but no turns)"),
        Defect(F, "conv-1", "session_4", "session_without_turns", "'11:00 am on 20 December, 2023'",
               "skipped (date but no turns)"),
        Defect(F, "conv-1/qa[0]", "evidence[1]", "evidence_duplicate", "'D1:3'", "duplicate dropped"),
        Defect(F, "conv-1/qa[1]", "evidence[0]", "evidence_multi_id", "'D1:1; D2:2'", "split into D1:1, D2:2"),
        Defect(F, "conv-1/qa[2]", "evidence[0]", "evidence_multi_id", "'D1:2 D2:1 D1:1'",
               "split into D1:2, D2:1, D1:1"),
        Defect(F, "conv-1/qa[3]", "answer", "answer_not_string", "2023", "converted to str"),
        Defect(F, "conv-1/qa[3]", "evidence[0]", "evidence_zero_padded", "'D2:01'", "normalised to D2:1"),
        Defect(F, "conv-1/qa[4]", "evidence[0]", "evidence_malformed", "'D:1:3'", "normalised to D1:3"),
        Defect(F, "conv-1/qa[5]", "evidence[0]", "evidence_malformed", "'D:9:9'",
               "dropped from gold (D9:9 does not exist)"),
        Defect(F, "conv-1/qa[6]", "evidence[0]", "evidence_unparseable", "'D'", "dropped from gold"),
        Defect(F, "conv-1/qa[6]", "evidence", "question_without_gold", "['D']", "kept; its recall is undefined"),
        Defect(F, "conv-1/qa[7]", "evidence[0]", "evidence_not_found", "'D1:4'", "dropped from gold (no such turn)"),
        Defect(F, "conv-1/qa[9]", "evidence", "question_without_gold", "[]", "kept; its recall is undefined"),
        # the rule for adversarial questions with gold (README, Metric conventions): reported, evidence kept, unscored
        Defect(F, "conv-1/qa[8]", "evidence[0]", "adversarial_with_gold", "['D1:1']",
               "not scored: an adversarial question's correct recall is nothing (scored by abstention only)"),
    ]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d[0]["conversation"]["session_1"][0].update(speaker="Zed"),
     "record conv-1/session_1[0]: field 'speaker': 'Zed' is neither speaker_a nor speaker_b"),
    (lambda d: d[0]["conversation"]["session_1"][1].pop("text"), "record conv-1/session_1[1]: missing field 'text'"),
    (lambda d: d[1].pop("sample_id"), "record [1]: missing field 'sample_id'"),
    (lambda d: d[0]["qa"][2].update(evidence="D1:1"), "record conv-1/qa[2]: field 'evidence' must be a list"),
    (lambda d: d[0]["conversation"]["session_2"][0].update(dia_id="D1:1"),
     "record conv-1/session_2[0]: field 'dia_id': duplicate 'D1:1'"),
])
def test_structural_errors_name_file_record_field(tmp_path, mutate, message):
    import json

    data = json.loads(FIX.read_text())
    mutate(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError) as e:
        load_locomo(path=bad)
    assert str(e.value).startswith(f"{bad}: ") and message in str(e.value)


def test_malformed_json_and_missing_path(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"sample_id": "x",\n  oops}]')
    with pytest.raises(ValueError) as e:
        load_locomo(path=bad)
    assert str(e.value).startswith(f"{bad}:2: malformed JSON")
    with pytest.raises(FileNotFoundError, match="BENCH_DATA_DIR") as e:
        load_locomo(path=tmp_path / "nope.json")
    assert str(tmp_path / "nope.json") in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("config, sub, name", [("locomo", "locomo", "locomo"),
                                               ("locomo_2025", "locomo_2025_fixed", "locomo_2025")])
def test_hydra_configs(tmp_path, config, sub, name):
    from hydra.utils import instantiate

    (tmp_path / sub).mkdir()
    (tmp_path / sub / "locomo10.json").write_bytes(FIX.read_bytes())
    cfg = OmegaConf.create({"paths": {"datasets": str(tmp_path)},
                            "dataset": OmegaConf.load(REPO / "configs" / "dataset" / f"{config}.yaml")})
    c = instantiate(cfg.dataset)
    assert c.name == name and c.source == str(tmp_path / sub / "locomo10.json")
    assert len(c.questions) == 11 and c.conversations[0].turns[0].role == "user"


# ---- real files (skip when absent) -------------------------------------------------------------

def _real(bench_data_dir, sub):
    path = bench_data_dir / sub / "locomo10.json"
    if not path.is_file():
        pytest.skip(f"{path} absent (set BENCH_DATA_DIR to the directory holding {sub}/locomo10.json)")
    return load_locomo(path=path)


def test_real_locomo_counts(bench_data_dir):
    c = _real(bench_data_dir, "locomo")
    turns = c.turns()
    assert len(c.conversations) == 10
    assert len({(t.conversation_id, t.session) for t in turns}) == 272
    assert len(turns) == 5882
    assert len(c.questions) == 1986
    by_cat = Counter(q.category for q in c.questions)
    assert by_cat == {"multi-hop": 282, "temporal": 321, "open-domain": 96, "single-hop": 841, "adversarial": 446}
    assert sum(not q.adversarial for q in c.questions) == 1540
    assert Counter(d.kind for d in c.defects) == {
        "session_without_turns": 16, "answer_not_string": 6, "evidence_multi_id": 4, "question_without_gold": 4,
        "evidence_not_found": 2, "evidence_duplicate": 1, "evidence_malformed": 1, "evidence_unparseable": 1,
        "evidence_zero_padded": 1, "adversarial_with_gold": 446}  # every category-5 question carries evidence
    q = {q.question_id: q for q in c.questions}
    assert q["conv-26/q37"].evidence == ("D8:6", "D9:17")
    assert "D11:26" in q["conv-43/q18"].evidence
    assert q["conv-50/q69"].evidence == ("D30:5",)
    assert "D10:19" not in q["conv-42/q58"].evidence and q["conv-42/q58"].evidence
    keys = {t.key for t in turns}
    assert all(f"{x.conversation_id}|{e}" in keys for x in c.questions for e in x.evidence)


def test_real_locomo_2025_counts(bench_data_dir):
    c = _real(bench_data_dir, "locomo_2025_fixed")
    assert len(c.conversations) == 10 and len(c.turns()) == 5882
    assert len(c.questions) == 1985
    assert sum(q.adversarial for q in c.questions) == 446
    assert len({q.question_id for q in c.questions}) == 1985
    assert Counter(d.kind for d in c.defects)["evidence_multi_id"] == 3  # "D8:6; D9:17" was fixed in 2025


def test_out_of_range_session_date_is_an_error(tmp_path):
    import json

    data = json.loads(FIX.read_text())
    data[0]["conversation"]["session_2_date_time"] = "12:05 am on 9 May, 2223"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError) as e:
        load_locomo(path=bad)
    assert str(e.value) == (f"{bad}: record conv-1: field 'session_2_date_time' is out of range: "
                            f"'12:05 am on 9 May, 2223' is year 2223, outside 1900-01-01..2200-01-01 (POSIX seconds, UTC)")

