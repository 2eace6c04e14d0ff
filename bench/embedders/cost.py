"""What embedding a corpus through a paid API will cost, said before the run starts.

Counting rule: the texts are the model inputs (side prefix + text, see ``bench.embedders.base``)
that the embedding cache does not hold yet, each distinct input once; tokens are counted with
tiktoken ``cl100k_base`` (the tokenizer of OpenAI's embedding models; for other models an
estimate); cost = tokens / 1e6 * ``price_per_mtok`` (US$ per million input tokens, from the
embedder's YAML). Only embedders with a ``price_per_mtok`` attribute (the HTTP ones) get an estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.embedders.cache import CachedEmbedder

ENCODING = "cl100k_base"


def estimate(n_texts: int, tokens: int, price_per_mtok: float | None) -> dict:
    """``{"texts", "tokens", "price_per_mtok", "usd"}``; usd is NaN when the price is unknown."""
    usd = math.nan if price_per_mtok is None else tokens / 1e6 * price_per_mtok
    return {"texts": n_texts, "tokens": tokens, "price_per_mtok": price_per_mtok, "usd": usd}


def estimate_line(est: dict) -> str:
    """"embedding N texts, ~T tokens, ~$X at $P/M" (or a note that no price is set)."""
    head = f"embedding {est['texts']:,} texts, ~{est['tokens']:,} tokens"
    if est["price_per_mtok"] is None:
        return f"{head} (no price set: embedder.price_per_mtok, US$ per million tokens)"
    return f"{head}, ~${est['usd']:,.4f} at ${est['price_per_mtok']:g}/M"


def inputs_to_embed(embedder, documents: Sequence[str], queries: Sequence[str]) -> list[str]:
    """The distinct model inputs not cached yet (every input when ``embedder`` is not a cache)."""
    if isinstance(embedder, CachedEmbedder):
        todo = embedder.uncached("documents", documents) + embedder.uncached("queries", queries)
    else:
        todo = [embedder.document_prefix + t for t in documents] + [embedder.query_prefix + t for t in queries]
    return list(dict.fromkeys(todo))


def corpus_estimate(embedder, price_per_mtok: float | None, documents: Sequence[str], queries: Sequence[str]) -> dict:
    """The estimate for embedding a corpus's memories (documents) and questions (queries)."""
    from bench.data.tokens import count_tokens_many

    todo = inputs_to_embed(embedder, documents, queries)
    return estimate(len(todo), sum(count_tokens_many(todo, ENCODING)), price_per_mtok)
