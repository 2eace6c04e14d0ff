"""Text-answer metrics: SQuAD's answer normalisation and token F1 of a generated answer against the gold one.

``token_f1`` is what ``bench.evaluation.qa`` (the LLM answer evaluation) reports beside the judge's accuracy; it is the
published SQuAD-style F1 (lower case, no punctuation, no articles, whitespace tokens, multiset overlap).
Answer coverage of injected memories (no model involved) is ``bench.metrics.answers``.
"""

from __future__ import annotations

import re
import string
from collections import Counter

_NO_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalise(text: str) -> list[str]:
    """SQuAD's answer normalisation, as tokens: lower case, no punctuation, no articles, whitespace split
    (``token_f1``, comparable with published SQuAD-style F1; answer coverage uses ``answers.answer_tokens``)."""
    text = str(text).lower().translate(_NO_PUNCT)
    return _ARTICLES.sub(" ", text).split()


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation (``normalise``: lower case, no punctuation, no articles), single spaces."""
    return " ".join(normalise(text))


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 on normalised whitespace tokens (1.0 when both are empty, 0.0 when one is)."""
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)
