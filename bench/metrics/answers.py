"""Answer coverage, offline: does the injected context contain the question's gold answer? No model involved.

Evidence recall asks whether the labelled turns were recalled; answer coverage asks whether the answer's words
are in what was injected, whichever turns carried them (labels are noisy; an answer is often repeated).

Definitions (per question with a gold ``answer``; NaN for a question without one, never a silent 0):

- tokens (``answer_tokens``, applied alike to the answer and to every memory's text): lower case; apostrophes
  deleted ("don't" -> "dont") and punctuation between two digits deleted ("1,000" -> "1000", "3.5" -> "35"), as
  SQuAD does; every other punctuation mark becomes a space (SQuAD deletes it, gluing "C. S.Lewis" into
  "c slewis"); whitespace split; runs of single letters joined ("c s lewis" -> "cs lewis", so "C. S.Lewis",
  "C.S. Lewis" and "CS Lewis" all read "cs lewis"; "U.S." and "US" read "us"); the articles and the function
  words of ``STOP_WORDS`` dropped (prepositions, conjunctions, pronouns, forms of be/do/have, a few modals), so
  "in", "on" or "and" never count as answer words.
- ``answer_recall`` = token recall of the answer in the context: sum over the answer's distinct tokens of
  min(count in the answer, count in the injected memories' texts) / the answer's token count.
- ``answer_contained`` = 1 when the whole normalised answer (its tokens in order) occurs inside one injected
  memory's normalised text, else 0. A phrase split across two memories does not count.
- The context is the injected memories' texts (without the ``role:`` prefix of the injection format, so a
  role name never counts as an answer word). Nothing injected: 0 for both.
- An answer with no token left (only punctuation, articles or stop words, e.g. "She") counts as no answer (NaN).
- As for every quality column, the summary averages them over the scored questions (non-adversarial, with
  gold evidence) that have an answer (``n_answer``); adversarial questions keep their own column
  (``adversarial_abstain_rate``: nothing recalled = correct), whatever their answer field says.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from bench.types import Conversation, Corpus, Question, Turn

NAN = float("nan")
# Answer coverage's stop words: the English function words that match in any text (the README and
# docs/interpreting.md point here). Negations (no, not, never) and numbers are content: they stay, and so does
# "us" (it is also "U.S." / "US" once initials are joined).
STOP_WORDS = frozenset("""
    a an the and or but nor so of in on at to for from with by about as into onto over under than
    i me my mine you your yours he him his she her hers it its we our ours they them their theirs
    this that these those is am are was were be been being do does did has have had will would can could
""".split())
_APOSTROPHES = str.maketrans("", "", "'\u2018\u2019")
_DIGIT_PUNCT = re.compile(rf"(?<=\d)[{re.escape(string.punctuation)}](?=\d)")
_PUNCT = str.maketrans(string.punctuation + "\u201c\u201d\u2013\u2014\u2026", " " * (len(string.punctuation) + 5))


# Every answer token is a substring of a text's ``squash``: lower case, without apostrophes, punctuation and whitespace
# (what ``answer_tokens`` deletes, turns into a separator or joins over). A turn whose squash holds none of the tokens
# its conversation's answers want cannot add to any answer's coverage, so ``AnswerIndex.build`` skips tokenising it.
SPACES = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
_SQUASH = dict.fromkeys(map(ord, "'\u2018\u2019" + string.punctuation + "\u201c\u201d\u2013\u2014\u2026" + SPACES))  # str.isspace's set
PREFILTER_MAX = 16  # a conversation's wanted tokens up to which the squash test is cheaper than tokenising every turn


_ASCII_SQUASH = bytes(k for k in _SQUASH if k < 128)  # what squash deletes from an ASCII text, as bytes


def squash(text: str) -> str:
    return str(text).lower().translate(_SQUASH)


def _squashed(text: str) -> bytes:
    """``squash(text)`` in UTF-8 (an ASCII text through ``bytes.translate``, several times faster than ``str.translate``)."""
    return text.lower().encode().translate(None, _ASCII_SQUASH) if text.isascii() else squash(text).encode()


def answer_tokens(text: str) -> list[str]:
    """Answer coverage's tokens of a text (the module docstring's rule): punctuation split, initials joined,
    stop words dropped."""
    text = _DIGIT_PUNCT.sub("", str(text).lower().translate(_APOSTROPHES)).translate(_PUNCT)
    out: list[str] = []
    initials = False  # the last token is a run of single letters
    for tok in text.split():
        single = len(tok) == 1 and tok.isalpha() and tok not in ("a", "i")  # "a" and "i" are words
        if single and initials:
            out[-1] += tok
        else:
            out.append(tok)
        initials = single
    return [t for t in out if t not in STOP_WORDS]


def coverage(*, answer: str, context: Sequence[str]) -> tuple[float, float]:
    """(``answer_recall``, ``answer_contained``) of one answer over the texts ``context``: ``AnswerIndex``'s arithmetic
    (the one implementation) on a one-question corpus; (NaN, NaN) without an answer, (0, 0) with nothing injected."""
    turns = tuple(Turn("c", str(i), "user", "user", text, None, i) for i, text in enumerate(context))
    corpus = Corpus(name="", conversations=(Conversation("c", turns),), questions=(Question("q", "c", "", None, (), answer=answer),))
    return AnswerIndex.build(corpus).score("q", [t.key for t in turns])


def token_recall(*, answer: str, context: Sequence[str]) -> float:
    """Share of the answer's tokens (``answer_tokens``) found in the context's (multiset); NaN without an answer."""
    return coverage(answer=answer, context=context)[0]


def contained(*, answer: str, context: Sequence[str]) -> float:
    """1 when the answer's tokens occur, as a token sequence, in one of the context's texts; NaN without an answer."""
    return coverage(answer=answer, context=context)[1]


def _candidates(turns: Sequence[Turn], want: set) -> list[int]:
    """Positions (ascending) of the turns whose ``squash`` holds one of the tokens ``want``: the others cannot hold
    them. The squashed texts are joined by NUL (which squash keeps; UTF-8 never puts a zero byte inside a character) and
    each token's occurrences are mapped to their turn; a conversation whose texts hold NUL is tested turn by turn."""
    texts = [t.text for t in turns]
    blob = b"\0".join(map(_squashed, texts))
    if blob.count(b"\0") != len(texts) - 1:
        return [i for i, s in enumerate(map(squash, texts)) if any(w in s for w in want)]
    at = []
    for w in want:
        w = w.encode()
        k = blob.find(w)
        while k >= 0:
            at.append(k)
            k = blob.find(w, k + 1)
    out, row, prev = [], 0, 0
    for k in sorted(at):
        row += blob.count(b"\0", prev, k)
        prev = k
        if not out or out[-1] != row:
            out.append(row)
    return out


@dataclass(frozen=True)
class _Question:
    local: dict  # memory key -> row of ``counts`` / ``inside``
    counts: np.ndarray  # (memories of the conversation, distinct answer tokens): each token's count in each memory
    want: np.ndarray  # each distinct answer token's count in the answer
    inside: np.ndarray  # bool per memory: the whole answer occurs in it
    hot: np.ndarray  # rows (ascending) of the memories holding an answer token or the whole answer: the others add nothing
    keys: tuple  # memory key of each row (the conversation's turns)


def prefix_coverage(*, positions: np.ndarray, counts: np.ndarray, inside: np.ndarray, want: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(answer_recall, answer_contained) of the first m of n selected memories, m = 0 .. n, from the selected memories that
    hold answer tokens: their ``positions`` in the selection (distinct, 0 .. n-1), their ``counts`` (one row each: the count
    of each distinct answer token) and ``inside`` (the whole answer occurs in it); ``want``: each token's count in the
    answer. The memories not given add nothing, so both are step functions that move only at ``positions``."""
    order = np.argsort(positions, kind="stable")
    got = np.zeros(len(order) + 1, dtype=np.int64)  # answer tokens covered once the first j of them are in
    np.minimum(np.cumsum(counts[order], axis=0), want).sum(axis=1, out=got[1:])
    whole = np.zeros(len(order) + 1, dtype=bool)
    np.logical_or.accumulate(inside[order], out=whole[1:])
    j = np.searchsorted(positions[order], np.arange(n + 1), side="left")  # how many of them lie in the first m
    return got[j] / want.sum(), whole[j].astype(float)


@dataclass(frozen=True)
class AnswerIndex:
    """Per question of a corpus, what scoring a selection needs, computed once (normalised texts per turn).

    ``score(question_id, ids)`` is (``answer_recall``, ``answer_contained``) of that question's answer over the texts
    of ``ids`` (tests check it against the module docstring's definitions, written plainly), in O(len(ids)) array work."""

    questions: dict  # question id -> _Question, or None (no answer)

    @staticmethod
    def build(corpus: Corpus) -> AnswerIndex:
        # per conversation: the postings (memory rows, counts) of every token some answer holds, and the normalised
        # texts joined by NUL (which no phrase holds), so a phrase is found by ``str.find`` and mapped to its memory
        answers = {q.question_id: answer_tokens(q.answer) if q.answer else [] for q in corpus.questions}
        wanted: dict[str, set] = {}
        for q in corpus.questions:
            wanted.setdefault(q.conversation_id, set()).update(answers[q.question_id])
        per_conv: dict[str, tuple] = {}
        for c in corpus.conversations:
            postings: dict[str, tuple[list, list]] = {}
            want = wanted.get(c.conversation_id, set())
            texts = ["  "] * len(c.turns)  # what an empty token list gives
            for i in _candidates(c.turns, want) if len(want) <= PREFILTER_MAX else range(len(c.turns)):
                t = c.turns[i]
                toks = answer_tokens(t.text)
                for tok in want.intersection(toks):
                    rows, counts = postings.setdefault(tok, ([], []))
                    rows.append(i)
                    counts.append(toks.count(tok))
                texts[i] = f" {' '.join(toks)} "
            starts = np.cumsum([0] + [len(x) + 1 for x in texts])[:-1]
            keys = tuple(t.key for t in c.turns)
            per_conv[c.conversation_id] = (dict(zip(keys, range(len(keys)))), postings, "\0".join(texts), starts, keys)
        out: dict = {}
        for q in corpus.questions:
            want = Counter(answers[q.question_id])
            conv = per_conv.get(q.conversation_id)
            if not want or conv is None:
                out[q.question_id] = None
                continue
            local, postings, text, starts, keys = conv
            tokens = list(want)
            counts = np.zeros((len(local), len(tokens)), dtype=np.int64)
            hot = set()
            for j, tok in enumerate(tokens):
                rows, n = postings.get(tok, ((), ()))
                counts[list(rows), j] = n
                hot.update(rows)
            phrase = f" {' '.join(answers[q.question_id])} "
            inside = np.zeros(len(local), dtype=bool)
            at = text.find(phrase)
            while at >= 0:
                inside[np.searchsorted(starts, at, side="right") - 1] = True
                at = text.find(phrase, at + 1)
            hot.update(np.flatnonzero(inside).tolist())
            out[q.question_id] = _Question(local, counts, np.array([want[t] for t in tokens], dtype=np.int64), inside,
                                           np.array(sorted(hot), dtype=np.int64), keys)
        return AnswerIndex(out)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The index as flat arrays (what ``from_arrays`` needs with the same corpus): per question with an answer its id,
        its distinct answer tokens' counts and its hot memories (rows, token counts, whole answer inside); nothing else
        holds information (the other memories hold no answer token)."""
        qs = [(k, q) for k, q in self.questions.items() if q is not None]
        cat = lambda parts, dtype: np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)  # noqa: E731
        return {"question_id": np.array([k for k, _ in qs], dtype=str), "n_tokens": np.array([len(q.want) for _, q in qs], dtype=np.int64),
                "want": cat([q.want for _, q in qs], np.int64), "n_hot": np.array([len(q.hot) for _, q in qs], dtype=np.int64),
                "hot": cat([q.hot for _, q in qs], np.int64), "hot_counts": cat([q.counts[q.hot].ravel() for _, q in qs], np.int64),
                "hot_inside": cat([q.inside[q.hot] for _, q in qs], bool)}

    @staticmethod
    def from_arrays(corpus: Corpus, arrays) -> AnswerIndex:
        """The index ``to_arrays`` flattened, for the same corpus (``ValueError`` when the arrays do not fit it)."""
        qs = {q.question_id: q for q in corpus.questions}
        convs = {c.conversation_id: c for c in corpus.conversations}
        rows: dict[str, tuple[dict, tuple]] = {}  # conversation -> (key -> row, keys), shared by its questions as ``build`` does
        out: dict = dict.fromkeys(qs)
        ids, n_tok, n_hot = arrays["question_id"].tolist(), arrays["n_tokens"], arrays["n_hot"]
        want, hot, counts, inside = arrays["want"], arrays["hot"], arrays["hot_counts"], arrays["hot_inside"]
        if not (len(ids) == len(n_tok) == len(n_hot) and n_tok.sum() == len(want) and n_hot.sum() == len(hot) == len(inside)
                and int((n_hot * n_tok).sum()) == len(counts)):
            raise ValueError("answer index arrays: their lengths do not agree")
        w = h = c = 0
        for qid, k, n in zip(ids, n_tok.tolist(), n_hot.tolist()):
            q = qs.get(qid)
            conv = convs.get(q.conversation_id) if q is not None else None
            if conv is None:
                raise ValueError(f"answer index arrays: question {qid!r} is not in corpus {corpus.name!r}")
            if q.conversation_id not in rows:
                keys = tuple(t.key for t in conv.turns)
                rows[q.conversation_id] = dict(zip(keys, range(len(keys)))), keys
            local, keys = rows[q.conversation_id]
            hq = hot[h : h + n]
            if n and (hq.min() < 0 or hq.max() >= len(keys)):
                raise ValueError(f"answer index arrays: question {qid!r} names a memory its conversation does not have")
            dense, whole = np.zeros((len(keys), k), dtype=np.int64), np.zeros(len(keys), dtype=bool)
            dense[hq] = counts[c : c + n * k].reshape(n, k)
            whole[hq] = inside[h : h + n]
            out[qid] = _Question(local, dense, want[w : w + k].copy(), whole, hq.copy(), keys)
            w, h, c = w + k, h + n, c + n * k
        return AnswerIndex(out)

    def prefixes(self, question_id: str, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(answer_recall, answer_contained) of the first n of ``ids`` (distinct), for n = 0 .. len(ids): element n
        equals ``score(question_id, ids[:n])``. NaN arrays without an answer."""
        q = self.questions.get(question_id)
        if q is None:
            return np.full(len(ids) + 1, NAN), np.full(len(ids) + 1, NAN)
        try:
            rows, known = np.array(itemgetter(*ids)(q.local) if len(ids) > 1 else [q.local[i] for i in ids], dtype=np.int64), None
        except KeyError:  # an id outside the question's conversation: it adds nothing
            got = [q.local.get(i) for i in ids]
            rows, known = np.array([r or 0 for r in got], dtype=np.int64), np.array([r is not None for r in got], dtype=bool)
        counts, inside = q.counts[rows], q.inside[rows]
        if known is not None:
            counts, inside = counts * known[:, None], inside & known
        have = np.zeros((len(ids) + 1, len(q.want)), dtype=np.int64)
        np.cumsum(counts, axis=0, out=have[1:])
        recall = np.minimum(have, q.want).sum(axis=1) / q.want.sum()
        inside = np.concatenate([[False], np.logical_or.accumulate(inside)])
        return recall, inside.astype(float)

    def hot(self, question_id: str) -> tuple | None:
        """(keys, counts, inside, want) of the memories of a question's conversation that hold an answer token or the whole
        answer (``prefix_coverage``'s inputs but the positions); None without an answer."""
        q = self.questions.get(question_id)
        if q is None:
            return None
        return tuple(q.keys[i] for i in q.hot.tolist()), q.counts[q.hot], q.inside[q.hot], q.want

    def score_many(self, question_ids: Sequence[str], ids: Sequence[str]) -> tuple[list[float], list[float]]:
        """``score`` of each question for the same injected memories ``ids`` (distinct, or their set): only each
        question's hot memories are looked up, in ``ids`` made a set once."""
        rec, cont = [], []
        have = None
        for qid in question_ids:
            q = self.questions.get(qid)
            if q is None:
                rec.append(NAN)
                cont.append(NAN)
                continue
            if have is None:
                have = ids if isinstance(ids, (set, frozenset)) else set(ids)
            rows = np.array([r for r in q.hot.tolist() if q.keys[r] in have], dtype=np.int64)
            rec.append(float(np.minimum(q.counts[rows].sum(axis=0), q.want).sum() / q.want.sum()))
            cont.append(float(q.inside[rows].any()))
        return rec, cont

    def score(self, question_id: str, ids: Sequence[str]) -> tuple[float, float]:
        """(answer_recall, answer_contained) of a question for the injected memories ``ids``; (NaN, NaN) without an
        answer. An id outside the question's conversation adds nothing."""
        q = self.questions.get(question_id)
        if q is None:
            return NAN, NAN
        rows = [r for r in map(q.local.get, ids) if r is not None]
        if not rows:
            return 0.0, 0.0
        have = q.counts[rows].sum(axis=0)
        return float(np.minimum(have, q.want).sum() / q.want.sum()), float(q.inside[rows].any())
