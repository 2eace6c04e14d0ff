"""PE: memory and speed of embedding long turns.

Times: embedding LongMemEval-sized long turns (synthetic, 35 % past 256 tokens; ``--pe-texts``, default 23,614) with
MiniLM through our path (``CachedEmbedder`` + ``bench.replay.trace.embed_texts``), a child process: its peak RSS (VmHWM) and
its throughput.
Reference: the raw onnxruntime loop (``common.RawOnnx``) on the same texts, a child process.
Target: our peak RSS <= 1.5 GB and our throughput / raw >= 0.9; the raw loop's peak RSS beside them (information).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.tools.perf.common import _WORDS, REPO, RawOnnx, Ratio, vm_hwm_bytes


def long_texts(n: int, *, long_share: float = 0.35, seed: int = 0) -> list[str]:
    """``n`` synthetic chat turns, ``long_share`` of them 300-600 words (well past MiniLM's 256 tokens), the rest 5-40 words,
    shuffled (a LongMemEval-sized haystack is 23,614 turns, 35 % longer than 256 tokens)."""
    rng = np.random.default_rng(seed)
    n_long = int(round(n * long_share))
    sizes = np.concatenate([rng.integers(300, 601, n_long), rng.integers(5, 41, n - n_long)])
    rng.shuffle(sizes)
    words = np.array(_WORDS)
    return [" ".join(words[rng.integers(0, len(words), k)]) + "." for k in sizes.tolist()]


def embed_child(which: str, n: int) -> dict:
    """Run in a child process: embed ``long_texts(n)`` with ``which`` ("ours": ``CachedEmbedder(MiniLMEmbedder)`` through
    ``bench.replay.trace.embed_texts`` on an empty cache, as a run does; "raw": ``RawOnnx``); texts/s and this process's VmHWM."""
    texts = long_texts(n)
    if which == "ours":
        from bench.embedders.cache import CachedEmbedder
        from bench.embedders.minilm import MiniLMEmbedder
        from bench.replay.trace import embed_texts

        inner = MiniLMEmbedder(progress=False)
        inner.embed(["warm up the session"])
        tmp = tempfile.TemporaryDirectory(prefix="rb-pe-")
        emb = CachedEmbedder(inner, tmp.name)

        def fn(x):
            return embed_texts(emb, x, side="documents")
    elif which == "raw":
        raw = RawOnnx()
        raw.embed(["warm up the session"])
        fn = raw.embed
    else:
        raise ValueError(f"embed_child: unknown side {which!r} (ours or raw)")
    t0 = time.perf_counter()
    fn(texts)
    elapsed = time.perf_counter() - t0
    return {"texts": n, "texts_per_s": n / elapsed, "seconds": elapsed, "vm_hwm_bytes": vm_hwm_bytes(os.getpid())}


def _embed_in_child(which: str, n: int) -> dict:
    code = f"import json; from bench.tools.perf.pe import embed_child; print(json.dumps(embed_child({which!r}, {int(n)})))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError(f"embedding child ({which}) exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pe_embedding_memory(n: int = 23_614) -> list[Ratio]:
    """Peak RSS of our embedding path on long turns, and its throughput against the raw session, a child process each."""
    ours, raw = _embed_in_child("ours", n), _embed_in_child("raw", n)
    method = (f"{n:,} synthetic turns (35 % of 300-600 words, past MiniLM's 256 tokens; bench.tools.perf.pe.long_texts), one child "
              "process per side: CachedEmbedder(MiniLMEmbedder) through bench.replay.trace.embed_texts on an empty cache vs the "
              "hand-written RawOnnx loop; peak RSS = the child's VmHWM at the end")
    details = {"ours": ours, "raw": raw}
    return [Ratio("PE/rss", "peak RSS embedding LongMemEval-sized long turns (MiniLM, our path)", ours["vm_hwm_bytes"] / 1e9, "<=", 1.5,
                  "GB", method=method, details=details),
            Ratio("PE/throughput", "our embedding throughput / raw ONNX session on the same long turns",
                  ours["texts_per_s"] / raw["texts_per_s"], ">=", 0.9, method=method, details=details),
            Ratio("PE/raw_rss", "peak RSS of the raw ONNX session on the same turns", raw["vm_hwm_bytes"] / 1e9, "<=", 1.5, "GB",
                  method=method, details=details, info=True)]


def run(args, ctx) -> list[Ratio]:
    return pe_embedding_memory(args.pe_texts)
