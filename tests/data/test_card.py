"""Dataset card, defect summary, kind detection / load_corpus, and the ``recallbench data`` CLI."""

import json
import sys
import types
from pathlib import Path

import pytest

from bench.cli.data import main
from bench.data import detect_kind, load_corpus
from bench.data.card import (
    count_corpus_tokens,
    dataset_card,
    defect_kinds,
    defect_summary,
)
from bench.data.locomo import load_locomo
from bench.data.longmemeval import load_longmemeval
from bench.data.own import load_own
from bench.types import Corpus, Defect

DATA = Path(__file__).parents[1] / "fixtures" / "data"
LOCOMO, LME, OWN = DATA / "locomo_tiny.json", DATA / "lme", DATA / "own_tiny"
UNREACH, MS = DATA / "own_unreachable", DATA / "own_ms_timestamp"
REPO = Path(__file__).resolve().parents[2]


def words(texts):
    return sum(len(t.split()) for t in texts), "words (test)"


def test_defect_kinds_counts_and_order():
    got = [(kind, n, len(ex)) for kind, n, ex in defect_kinds(load_locomo(path=LOCOMO))]
    assert got == [  # by count descending, then kind
        ("evidence_malformed", 2, 2), ("evidence_multi_id", 2, 2), ("question_without_gold", 2, 2),
        ("session_without_turns", 2, 2), ("adversarial_with_gold", 1, 1), ("answer_not_string", 1, 1), ("evidence_duplicate", 1, 1),
        ("evidence_not_found", 1, 1), ("evidence_unparseable", 1, 1), ("evidence_zero_padded", 1, 1)]
    many = Corpus("m", (), (), tuple(Defect("f", f"r{i}", "x", "k", str(i), "a") for i in range(5)))
    [(kind, n, examples)] = defect_kinds(many)
    assert (kind, n, [d.record for d in examples]) == ("k", 5, ["r0", "r1", "r2"])  # at most 3 examples


def test_defect_summary_one_line():
    assert defect_summary(()) == "no label defects"
    d = lambda kind: Defect("f", "r", "x", kind, "v", "a")  # noqa: E731
    assert defect_summary([d("gold_after_asked_at")]) == "1 label defect: 1 gold_after_asked_at"
    assert defect_summary([d("gold_after_asked_at"), d("evidence_not_found"), d("evidence_not_found")]) == (
        "3 label defects: 2 evidence_not_found, 1 gold_after_asked_at")  # by count, then kind
    # the own_unreachable fixture: 1 evidence_not_found, 2 gold_after_asked_at, 1 asked_before_conversation
    assert defect_summary(load_own(path=UNREACH).defects) == (
        "4 label defects: 2 gold_after_asked_at, 1 asked_before_conversation, 1 evidence_not_found")


def test_card_values_on_locomo_fixture():
    card = dataset_card(load_locomo(path=LOCOMO), count=words)
    lines = card.splitlines()
    assert lines[0] == "### Dataset card: locomo"
    for row in [
        "| conversations | 2 |",
        "| sessions | 3 |",                        # conv-1 sessions 1-2, conv-2 session 1
        "| turns | 7 (assistant 3, user 4) |",     # Ann x3 + Cara = user; Bob x2 + Dan = assistant
        "| turns per conversation (mean) | 3.50 |",
        "| questions | 11 (1 adversarial, 10 non-adversarial) |",
        "| gold turns per question (mean, all) | 1.09 |",              # 12 gold ids / 11
        "| gold turns per question (mean, non-adversarial) | 1.10 |",  # 11 / 10
        "| non-adversarial questions without gold | 2 |",
        "| tokens, words (test) | 43 total, 22 per conversation |",   # 6+13+4+3+4 + 4+9 words
        "| defects | 14 |",  # 13 + conv-1/qa[8]: adversarial with gold
        "| multi-hop | 2 | 0 | 2.50 |",
        "| adversarial | 1 | 1 | 1.00 |",
        "- `evidence_multi_id`: 2",
        "  - conv-1/qa[1] evidence[0] 'D1:1; D2:2' -> split into D1:1, D2:2",
    ]:
        assert row in lines, row


def test_card_shows_unreachable_gold():
    lines = dataset_card(load_own(path=UNREACH), count=words).splitlines()
    for row in [
        "| gold turns after asked_at (unreachable, scored as misses) | 2 in 2 questions |",  # q1 t2, q4 t1
        "| questions asked before their conversation (see no turn) | 1 |",                  # q4
        "| defects | 4 |",
        "- `gold_after_asked_at`: 2",
        "  - line 1 (q1) evidence[2] 'x' -> kept in gold: unreachable, scored as a miss".replace(
            "'x'", "'t2' at 2024-01-02T10:00:00Z > asked_at 2024-01-01T10:00:00Z"),
        "- `asked_before_conversation`: 1",
    ]:
        assert row in lines, row
    clean = dataset_card(load_locomo(path=LOCOMO), count=words).splitlines()
    assert "| gold turns after asked_at (unreachable, scored as misses) | 0 |" in clean
    assert "| questions asked before their conversation (see no turn) | 0 |" in clean


def test_card_escapes_pipes_and_handles_empty():
    card = dataset_card(Corpus("empty", (), ()), count=words)
    assert "| conversations | 0 |" in card and "No defects found." in card
    assert "| turns per conversation (mean) | n/a |" in card


def test_token_counter_uses_bench_tokens_or_labels_fallback(monkeypatch):
    fake = types.ModuleType("bench.data.tokens")
    fake.count_tokens = lambda text, encoding: len(text.split()) + (encoding == "cl100k_base")
    monkeypatch.setitem(sys.modules, "bench.data.tokens", fake)
    assert count_corpus_tokens(["a b", "c"]) == (5, "cl100k_base (tiktoken)")  # (2+1) + (1+1)

    def broken(text, encoding):
        raise OSError("no BPE file")

    fake.count_tokens = broken
    assert count_corpus_tokens(["abcdefgh"]) == (2, "≈ chars/4 (bench.data.tokens failed: OSError)")
    monkeypatch.setitem(sys.modules, "bench.data.tokens", None)  # import raises ImportError
    assert count_corpus_tokens(["abcdefgh", "abcd"]) == (3, "≈ chars/4 (bench.data.tokens not importable)")


def test_detect_kind_and_load_corpus(tmp_path):
    assert detect_kind(LOCOMO) == "locomo"
    assert detect_kind(LME) == "longmemeval"
    assert detect_kind(OWN) == "own"
    lst = tmp_path / "lme.json"
    lst.write_text(json.dumps([json.loads((LME / "2_q1.json").read_text())]))
    assert detect_kind(lst) == "longmemeval"
    with pytest.raises(ValueError, match="cannot detect the corpus kind"):
        detect_kind(tmp_path)
    assert load_corpus("locomo_2025", LOCOMO).name == "locomo_2025"
    assert load_corpus("auto", LME).questions == load_longmemeval(path=LME).questions
    assert load_corpus("own", OWN, name="n").name == "n"
    with pytest.raises(ValueError, match="unknown corpus kind 'csv'"):
        load_corpus("csv", OWN)
    with pytest.raises(FileNotFoundError) as e:
        load_corpus("own", tmp_path / "missing")
    assert str(e.value) == (f"dataset path not found: {tmp_path / 'missing'} (the data directory is set by env "
                            f"BENCH_DATA_DIR / config paths.datasets; override one dataset with dataset.path=...)")


@pytest.mark.parametrize("path, title", [(LOCOMO, "locomo"), (LME, "longmemeval_oracle"), (OWN, "own_tiny")])
def test_cli_check(capsys, path, title):
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"### Dataset card: {title}\n")
    assert "#### Defects" in out


def test_cli_check_kind_flag_and_defects(capsys):
    assert main(["check", str(LOCOMO), "--kind", "locomo_2025"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### Dataset card: locomo_2025\n")
    assert "- `evidence_zero_padded`: 1\n  - conv-1/qa[3] evidence[0] 'D2:01' -> normalised to D2:1\n" in out


def test_cli_convert_round_trips(tmp_path, capsys):
    out_dir = tmp_path / "converted"
    assert main(["convert", str(LME), str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote longmemeval_oracle: 2 conversations, 8 turns, 2 questions -> {out_dir}\n")
    assert "source defect gold_fallback_to_session: 1" in out
    src, back = load_longmemeval(path=LME), load_own(path=out_dir)
    assert (back.conversations, back.questions) == (src.conversations, src.questions)


def test_cli_check_strict_exits_1_after_the_card(capsys):
    assert main(["check", str(UNREACH)]) == 0  # defects alone do not fail a check
    capsys.readouterr()
    assert main(["check", str(UNREACH), "--strict"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("### Dataset card: own_unreachable\n") and "#### Defects" in captured.out
    assert captured.err == ("strict: 4 label defects: 2 gold_after_asked_at, 1 asked_before_conversation, "
                            "1 evidence_not_found\n")
    assert main(["check", str(REPO / "datasets" / "demo"), "--strict"]) == 0  # the demo corpus has no defects
    assert capsys.readouterr().err == ""


def test_cli_check_millisecond_timestamp_one_line_exit_2(capsys):
    assert main(["check", str(MS)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"error: {MS / 'turns.jsonl'}:2 (turn_id 't2'): field 'timestamp' is out of range: "
                            f"1700000000000 is year 55840, outside 1900-01-01..2200-01-01 (POSIX seconds, UTC); "
                            f"it looks like epoch milliseconds (1700000000000 / 1,000 = 2023-11-14T22:13:20Z)\n")


@pytest.mark.parametrize("argv, start", [
    (["check", "/nonexistent/x.json"], "error: dataset path not found: /nonexistent/x.json"),
    (["check", "{bad}"], "error: {bad}:1: malformed JSON"),
    (["check", str(LOCOMO), "--kind", "longmemeval"], f"error: {LOCOMO}: record [0]: field 'question_id'"),
    (["convert", str(LOCOMO), "{csvdir}"], "error: write_own: {csvdir} holds a turns.csv"),
])
def test_cli_errors_one_line_exit_2(tmp_path, capsys, argv, start):
    bad = tmp_path / "bad.json"
    bad.write_text("[{oops")
    csvdir = tmp_path / "c"
    csvdir.mkdir()
    (csvdir / "turns.csv").write_text("x")
    fmt = {"bad": bad, "csvdir": csvdir}
    assert main([a.format(**fmt) for a in argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(start.format(**fmt))
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err


def test_module_entry_point_exits_2_without_traceback(tmp_path):
    import subprocess

    r = subprocess.run([sys.executable, "-m", "bench.cli.main", "data", "check", str(tmp_path / "nope")],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"error: dataset path not found: {tmp_path / 'nope'} (the data directory is set by env " \
                       f"BENCH_DATA_DIR / config paths.datasets; override one dataset with dataset.path=...)\n"


def test_module_entry_point_millisecond_timestamp_without_traceback():
    import subprocess

    r = subprocess.run([sys.executable, "-m", "bench.cli.main", "data", "check", str(MS), "--strict"],
                       capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"error: {MS / 'turns.jsonl'}:2 (turn_id 't2'): field 'timestamp' is out of range: "
                               f"1700000000000 is year 55840")
