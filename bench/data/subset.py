"""A fixed subset of a corpus (named conversations), and the CI-sized default dataset of ``make regress``.

Owns ``subset`` (keep named conversations with their questions and defects, in the order given)
and ``load_ci_subset``: LoCoMo (original release) cut to a few named conversations when the data
path has it, else the whole demo corpus. The two are different datasets (different ``name``), so a
regression gate never compares a LoCoMo run with a demo run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from bench.types import Corpus

log = logging.getLogger(__name__)


def subset(corpus: Corpus, conversations: Sequence[str], *, name: str) -> Corpus:
    """The named conversations of ``corpus`` (in the order given), their questions and defects."""
    wanted = [str(c) for c in conversations]
    if not wanted:
        raise ValueError(f"{corpus.source}: subset {name!r} names no conversation")
    if len(set(wanted)) != len(wanted):
        raise ValueError(f"{corpus.source}: subset {name!r} names a conversation twice: {wanted}")
    by_id = {c.conversation_id: c for c in corpus.conversations}
    missing = [c for c in wanted if c not in by_id]
    if missing:
        raise ValueError(f"{corpus.source}: subset {name!r}: no conversation {', '.join(map(repr, missing))} "
                         f"(the file has {', '.join(sorted(by_id))})")
    keep = set(wanted)
    questions = tuple(q for q in corpus.questions if q.conversation_id in keep)
    defects = tuple(d for d in corpus.defects if d.record.split("/")[0] in keep)
    source = f"{corpus.source} (conversations {', '.join(wanted)})"
    return Corpus(name=name, conversations=tuple(by_id[c] for c in wanted), questions=questions, defects=defects, source=source)


def load_ci_subset(*, datasets_dir: str | os.PathLike, demo_dir: str | os.PathLike, conversations: Sequence[str],
                   name: str = "locomo_ci", force_demo: bool = False) -> Corpus:
    """LoCoMo's named ``conversations`` (dataset ``name``) when the data path has LoCoMo, else the demo
    corpus (dataset "demo"); ``force_demo`` picks the demo corpus even when LoCoMo is there."""
    from bench.data.locomo import load_locomo
    from bench.data.own import load_own

    locomo = Path(datasets_dir) / "locomo" / "locomo10.json"
    if force_demo:
        log.info("dataset: the demo corpus (force_demo)")
        return load_own(path=demo_dir, name="demo")
    if locomo.is_file():
        corpus = subset(load_locomo(path=locomo, name="locomo"), conversations, name=name)
        log.info("dataset: %s = LoCoMo %s (%d turns, %d questions)", name, ", ".join(conversations),
                 len(corpus.turns()), len(corpus.questions))
        return corpus
    log.warning("LoCoMo not found at %s (set BENCH_DATA_DIR); using the demo corpus", locomo)
    return load_own(path=demo_dir, name="demo")
