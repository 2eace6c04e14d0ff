"""Offline sweep: a stored trace x strategies x thresholds (x formats) -> tidy per-question rows and a summary.

Never touches a store. Thresholds are exact decimals (labels "0.10" .. "0.90"), generated with
``Decimal`` so no float drift reaches a label.

Each strategy runs once per (threshold, question); the injection ``format`` axis only re-prices the
same selection (rows repeat per format with that format's tokens). Stateful strategies
(``StrategySpec.stateful``) are replayed per conversation in time order (``asked_at``, then file
order) with a fresh state per (strategy, threshold, conversation). Per-question rows carry, beside
the metrics, ``kind`` (what the strategy is: its function's name, ``limit``, ``threshold``, ``hybrid``,
``full_context``, ...; ``strategy`` is its configured name), ``route`` (the route a router took, ""
otherwise) and ``l1_selected`` / ``l1_correct``
(memories and gold memories injected through a tier named "L1"; NaN for strategies without tiers).
``tokens_full`` is the full-context cost of every turn the question may see, whatever the strategy's
role filter (full context is the honest baseline for a role-filtered strategy too). Who may see what
is ``bench.replay.visibility``'s rule; P/R/F1 are ``bench.metrics.prf``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from operator import attrgetter

import numpy as np
import pandas as pd

from bench import metrics
from bench.metrics.answers import AnswerIndex, prefix_coverage
from bench.selection.formats import TokenTable, c_prefix_costs, c_sections, check_formats
from bench.strategies.spec import Selection, StrategySpec, threshold_grid  # noqa: F401  (threshold_grid: re-exported)
from bench.strategies.vector import lowest_passing, passes
from bench.replay.trace import Trace
from bench.selection.basis import flips_thresholds
from bench.types import Corpus, Hits, memory_key
from bench.replay.visibility import Visibility, keys_of, parse_filter

_ID = attrgetter("id")
SUMMARY_KEYS = ["dataset", "embedder", "backend", "layout", "strategy", "threshold", "format"]
NAN = float("nan")
_COLS = ("strategy", "kind", "threshold", "qi", "n_selected", "n_correct", "latency_ns", "depth_saturated", "route", "l1_selected",
         "l1_correct", "answer_recall", "answer_contained")


@dataclass(frozen=True)
class _Ctx:
    question: object
    eligible: tuple
    gold: frozenset
    hits: Hits
    latency_ns: float
    full: dict
    seen: tuple  # keys of every memory the question may see (conversation order): a selection equal to it costs ``full``


def _as_selection(out) -> Selection:
    return out if isinstance(out, Selection) else Selection(out if isinstance(out, Hits) else tuple(out))


def _prefix_rule(spec: StrategySpec):
    """The vectorised rule of a prefix strategy (``bench.strategies.vector.PREFIX_RULES``) with its parameters, or None
    when the strategy must be called question by question."""
    from bench.strategies.vector import PREFIX_RULES

    fn = spec.fn
    if isinstance(fn, partial) and (fn.args or isinstance(fn.func, partial)):
        return None
    rule = PREFIX_RULES.get(fn.func if isinstance(fn, partial) else fn)
    p = spec.params
    if rule is None or spec.stateful or spec.calibrated or spec.needs_tokens or set(p) - {"k"} or \
            any(type(v) is not int or v < 0 for v in p.values()):
        return None
    return partial(rule, **p)


def _is_full_context(spec: StrategySpec) -> bool:
    """Is the strategy ``baselines.full_context`` as shipped (its selection is the question's eligible memories)?"""
    from bench.strategies.baselines import full_context

    fn = spec.fn
    if isinstance(fn, partial) and (fn.args or fn.keywords or isinstance(fn.func, partial)):
        return False
    return (fn.func if isinstance(fn, partial) else fn) is full_context and not (spec.params or spec.stateful or spec.calibrated
                                                                                or spec.needs_tokens)


def _view_rows(spec: StrategySpec, t, ctx: list[_Ctx], cols: dict, tok: dict, formats, cost, answers: AnswerIndex,
               chosen: dict | None) -> None:
    """The rows of full context at threshold ``t``: the questions of one view (they share their ``eligible``) share one
    selection, priced once; the same as calling it question by question."""
    by_view: dict[int, list[int]] = {}
    for i, c in enumerate(ctx):
        by_view.setdefault(id(c.eligible), []).append(i)
    nq = len(ctx)
    n_sel, n_cor = np.zeros(nq, np.int64), np.zeros(nq, np.int64)
    rec, cont = np.full(nq, NAN), np.full(nq, NAN)
    sat = np.zeros(nq, dtype=bool)
    costs = {f: np.zeros(nq, np.int64) for f in formats}
    for members in by_view.values():
        first = ctx[members[0]]
        keys = keys_of(first.eligible)
        have = set(keys)
        ids = keys if len(have) == len(keys) else tuple(dict.fromkeys(keys))  # distinct, in order
        whole = len(ids) == len(first.seen) and ids == first.seen  # priced once per view by the sweep (both tuples)
        price = {f: first.full[f] if whole else cost(f, ids) for f in formats}
        r, k = answers.score_many([ctx[i].question.question_id for i in members], have)
        for i, a, b in zip(members, r, k):
            c = ctx[i]
            n_sel[i], n_cor[i], rec[i], cont[i] = len(ids), len(c.gold & have), a, b
            sat[i] = spec.uses_store and 0 < len(c.hits) < len(c.eligible) and len(ids) >= len(c.hits) and set(c.hits.ids).issubset(have)
            for f in formats:
                costs[f][i] = price[f]
            if chosen is not None:
                chosen[c.question.question_id] = tuple(ids)
    _append(cols, tok, spec, t, n_sel=n_sel, n_cor=n_cor, sat=sat, rec=rec, cont=cont, costs=costs,
            latency=np.array([c.latency_ns for c in ctx], dtype=float) if spec.uses_store else np.full(nq, NAN))


def _append(cols: dict, tok: dict, spec: StrategySpec, t, *, n_sel, n_cor, sat, rec, cont, costs: dict, latency) -> None:
    """One strategy-at-threshold's rows, a value per question in each array (the array paths of ``sweep``)."""
    nq = len(n_sel)
    cols["strategy"].append(np.full(nq, spec.name, dtype=object))
    cols["kind"].append(np.full(nq, spec.kind, dtype=object))
    cols["threshold"].append(np.full(nq, NAN if t is None else t))
    cols["qi"].append(np.arange(nq))
    cols["n_selected"].append(n_sel)
    cols["n_correct"].append(n_cor)
    cols["latency_ns"].append(latency)
    cols["depth_saturated"].append(sat)
    cols["route"].append(np.full(nq, "", dtype=object))
    cols["l1_selected"].append(np.full(nq, NAN))
    cols["l1_correct"].append(np.full(nq, NAN))
    cols["answer_recall"].append(rec)
    cols["answer_contained"].append(cont)
    for f, c in costs.items():
        tok[f].append(c)


class _Prefixes:
    """Every question's hits as padded arrays, so a prefix strategy's rows come from array lookups: per question the
    negated scores, the correct hits among the first n and the tokens of the first n in each format (n = 0..len(hits)).
    A question whose scores are not finite and non-increasing, whose ids repeat or are not in the corpus is
    ``slow``: its strategies are called one by one; so is a format whose cost is not a sum over memories (C, or A
    with a line that does not start with a letter after the first) for that question."""

    def __init__(self, ctx: list[_Ctx], cost, token_counts: Mapping[str, int], separator_tokens: int, table, exact_a: bool,
                 vis: Visibility | None = None):
        self.ctx, self.cost, self.counts, self.sep, self.table, self.exact_a = ctx, cost, token_counts, separator_tokens, table, exact_a
        self._answers: tuple | None = None  # (the AnswerIndex, its arrays)
        self._above: dict[float, np.ndarray] = {}  # threshold -> n_above (``prepare``)
        keys = list(table.last["A"] if table is not None and "A" in table.last else token_counts)
        self.keys = keys
        # when the memories' rows are the corpus's (``vis``: same keys, same order), an id is looked up among its own
        # conversation's keys (a small table per conversation, as ``_conversation_rows`` builds it), else in ``row_of``
        self._vis = vis if vis is not None and len(keys) == len(vis.ts) and keys == vis.keys.tolist() else None
        self._by_conversation: dict[str, dict[str, int]] = {}
        nq = len(ctx)
        n_hits = np.fromiter((len(c.hits) for c in ctx), np.int64, nq)
        width = int(n_hits.max(initial=0))
        self.n_hits = n_hits
        self.n_eligible = np.fromiter((len(c.eligible) for c in ctx), np.int64, nq)
        self.latency = np.fromiter((c.latency_ns for c in ctx), np.float64, nq)
        self.neg = np.full((nq, width), np.inf)
        self.rows = np.zeros((nq, width), dtype=np.int64)
        gold = np.zeros((nq, width), dtype=bool)
        # every question's hits at once (flat, question-major); a question is slow when one of its ids is not in the
        # corpus or repeats, or its scores are not finite and non-increasing
        total = int(n_hits.sum())
        s = np.concatenate([np.asarray(c.hits.scores, dtype=np.float64) for c in ctx]) if total else np.zeros(0)
        r = np.concatenate([self.rows_of(c.question.conversation_id, c.hits.ids) for c in ctx]) if total else np.zeros(0, np.int64)
        qi = np.repeat(np.arange(nq), n_hits)
        pos = np.arange(total) - np.repeat(np.cumsum(n_hits) - n_hits, n_hits)
        bad = (r < 0) | ~np.isfinite(s)
        bad[1:] |= (qi[1:] == qi[:-1]) & (s[1:] > s[:-1])  # np.diff(s) > 0 within a question
        self.slow = np.zeros(nq, dtype=bool)
        self.slow[qi[bad]] = True
        self.neg[qi, pos], self.rows[qi, pos] = -s, np.maximum(r, 0)
        if total:  # an id repeated within a question: sort each row's memory rows and look at neighbours
            srt = np.where(np.arange(width)[None, :] < n_hits[:, None], self.rows, -1)
            srt.sort(axis=1)
            self.slow |= ((srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)).any(axis=1)
        self.neg[self.slow], self.rows[self.slow] = np.inf, 0
        g_rows = [[g for g in self.rows_of(c.question.conversation_id, c.gold).tolist() if g >= 0] for c in ctx]
        n_g = max(map(len, g_rows), default=0)
        if n_g and width:
            gm = np.full((nq, n_g), -1, dtype=np.int64)
            for i, g in enumerate(g_rows):
                gm[i, : len(g)] = g
            valid = (np.arange(width)[None, :] < n_hits[:, None]) & ~self.slow[:, None]
            for j in range(n_g):
                gold |= self.rows == gm[:, j : j + 1]
            gold &= valid
        self.correct = np.concatenate([np.zeros((nq, 1), np.int64), np.cumsum(gold, axis=1)], axis=1)
        self._tokens: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    @cached_property
    def row_of(self) -> dict[str, int]:
        """Memory key -> row, every key (built when an id is looked up outside its conversation's table; the corpus's
        own map when the rows are the corpus's)."""
        return self._vis.row_of if self._vis is not None else dict(zip(self.keys, range(len(self.keys))))

    def _conversation_rows(self, conversation_id: str) -> dict[str, int]:
        if self._vis is None:
            return self.row_of
        got = self._by_conversation.get(conversation_id)
        if got is None:
            start, end = self._vis.span(conversation_id)
            got = self._by_conversation[conversation_id] = dict(zip(keys_of(self._vis.turns.get(conversation_id, ())), range(start, end)))
        return got

    def rows_of(self, conversation_id: str, ids: Sequence[str]) -> np.ndarray:
        """The rows of ``ids`` (-1: not a memory of the corpus), looked up first among ``conversation_id``'s memories."""
        near = self._conversation_rows(conversation_id)
        try:
            return np.fromiter(map(near.__getitem__, ids), np.int64, len(ids))
        except KeyError:
            far = self.row_of
            return np.fromiter((near[k] if k in near else far.get(k, -1) for k in ids), np.int64, len(ids))

    def n_above(self, t: float) -> np.ndarray:
        """How many scores pass t (``vector.passes``) per question; rows are sorted best first (slow rows: +inf, none)."""
        got = self._above.get(t)
        return got if got is not None else passes(-self.neg, t).sum(axis=1)

    def prepare(self, thresholds) -> None:
        """``n_above`` of every threshold at once: per question one binary search over its negated scores (ascending),
        the same count as ``passes``: s >= t - eps exactly when -s <= -(t - eps)."""
        todo = [t for t in dict.fromkeys(thresholds) if t is not None and t not in self._above]
        if not todo or not len(self.neg):
            return
        cut = -lowest_passing(np.array(todo, dtype=float))
        out = np.empty((len(self.neg), len(todo)), dtype=np.int64)
        for i, row in enumerate(self.neg):
            out[i] = np.searchsorted(row, cut, side="right")
        for j, t in enumerate(todo):
            self._above[t] = out[:, j]

    def answers(self, index: AnswerIndex) -> tuple[np.ndarray, np.ndarray]:
        """(answer_recall, answer_contained) of the first n hits per question, n = 0..width (``AnswerIndex.prefixes``;
        NaN past a question's hits and for ``slow`` questions)."""
        if self._answers is None or self._answers[0] is not index:
            nq, width = self.neg.shape
            rec, cont = np.full((nq, width + 1), NAN), np.full((nq, width + 1), NAN)
            where = np.full(len(self.keys) + 1, -1, dtype=np.int64)  # memory row -> its position in the question's hits (last: none)
            for i in np.flatnonzero(~self.slow).tolist():
                n = int(self.n_hits[i])
                hot = index.hot(self.ctx[i].question.question_id)
                if hot is None:
                    continue
                keys, counts, inside, want = hot
                rows = self.rows[i, :n]
                where[rows] = np.arange(n)
                at = where[self.rows_of(self.ctx[i].question.conversation_id, keys)]  # -1: not a hit
                where[rows] = -1
                got = at >= 0
                rec[i, : n + 1], cont[i, : n + 1] = prefix_coverage(positions=at[got], counts=counts[got], inside=inside[got],
                                                                    want=want, n=n)
            self._answers = index, (rec, cont)
        return self._answers[1]

    def tokens(self, fmt: str) -> tuple[np.ndarray, np.ndarray]:
        """(tokens of the first n hits per question, n = 0..width; per question: must it be priced one by one)."""
        if fmt not in self._tokens:
            self._tokens[fmt] = self._build(fmt)
        return self._tokens[fmt]

    def _build(self, fmt: str) -> tuple[np.ndarray, np.ndarray]:
        nq, width = self.neg.shape
        out = np.zeros((nq, width + 1), dtype=np.int64)
        slow = self.slow.copy()
        valid = np.arange(width)[None, :] < self.n_hits[:, None]
        if fmt == "A" and not self.exact_a:
            per = np.array([self.counts[k] for k in self.keys], dtype=np.int64)
            out[:, 1:] = np.cumsum(np.where(valid, per[self.rows], 0), axis=1) + self.sep * np.arange(width)
            return out, slow
        t = self.table
        if fmt == "C":  # every prefix at once where sections sort by session whatever is selected, else one by one
            try:
                tok, anchor, brk, pos, section, ordered = c_sections(t, self.keys)
            except KeyError:  # a memory the table has not priced
                return out, np.ones(nq, dtype=bool)
            slow |= (~ordered[self.rows] & valid).any(axis=1)
            return c_prefix_costs(rows=self.rows, n_hits=np.where(slow, 0, self.n_hits), fixed=t.fixed["C"], tok=tok, anchor=anchor,
                                  brk=brk, pos=pos, section=section), slow
        joined, last = _column(t.joined[fmt], self.keys), _column(t.last[fmt], self.keys)
        if fmt == "A" and t.unsafe_a:
            unsafe = np.array([k in t.unsafe_a for k in self.keys])
            slow |= (unsafe[self.rows] & valid)[:, 1:].any(axis=1)
        before = np.concatenate([np.zeros((nq, 1), np.int64), np.cumsum(np.where(valid, joined[self.rows], 0), axis=1)], axis=1)
        out[:, 1:] = t.fixed[fmt] + t.per_gap[fmt] * np.arange(width) + before[:, :width] + last[self.rows]
        return out, slow


def _column(values: Mapping[str, int], keys: list[str]) -> np.ndarray:
    """``values[k]`` for every k of ``keys`` as an int64 array (read in one pass when the mapping holds exactly ``keys``,
    in that order, as every ``TokenTable`` column holds its corpus's keys)."""
    if len(values) == len(keys) and list(values) == keys:
        return np.fromiter(values.values(), np.int64, len(keys))
    return np.fromiter(map(values.__getitem__, keys), np.int64, len(keys))


def _contexts(trace: Trace, corpus: Corpus, questions: dict, vis: Visibility, roles) -> tuple[list[_Ctx], dict]:
    """Per trace row its ``_Ctx``, and the views: (conversation, asked_at) -> (eligible, full-context cost per format,
    filled by the caller, keys seen)."""
    ctx: list[_Ctx] = []
    views: dict[tuple, tuple] = {}
    table = trace.table
    for qid, ids, scores, latency in zip(table["question_id"].tolist(), table["hit_ids"].tolist(), table["hit_scores"].tolist(),
                                         table["latency_ns"].tolist()):
        q = questions.get(qid)
        if q is None:
            raise ValueError(f"sweep: trace question {qid!r} is not in corpus {corpus.name!r} ({corpus.source})")
        view = views.get((q.conversation_id, q.asked_at))
        if view is None:
            seen = vis.visible_turns(q)  # every role: the full-context cost
            eligible = seen if roles is None else vis.visible_turns(q, roles)
            view = views[(q.conversation_id, q.asked_at)] = (eligible, {}, keys_of(seen))
        ctx.append(_Ctx(q, view[0], frozenset(memory_key(q.conversation_id, e) for e in q.scored_evidence),
                        Hits(tuple(ids), tuple(np.asarray(scores, dtype=float).tolist())), float(latency), view[1], view[2]))
    return ctx, views


def replay_order(questions: Sequence) -> list[int]:
    """Indices of ``questions`` in time order: by ``asked_at`` (None = after everything), then given order."""
    return sorted(range(len(questions)), key=lambda i: (questions[i].asked_at is None, questions[i].asked_at or 0.0, i))


def sweep(
    trace: Trace,
    corpus: Corpus,
    strategies: Sequence[StrategySpec],
    thresholds: Sequence[float],
    token_counts: Mapping[str, int],
    *,
    separator_tokens: int = 0,
    embedder: str | None = None,
    formats: Sequence[str] = ("A",),
    format_tokens: TokenTable | None = None,
    calibrated: Mapping[str, np.ndarray] | None = None,
    record: dict | None = None,
    answer_coverage: bool = True,
    answers: AnswerIndex | None = None,
    shared: dict | None = None,
) -> pd.DataFrame:
    """One row per (strategy, threshold, format, question).

    A strategy with its own threshold grid (``StrategySpec.thresholds``) is swept over it instead of
    ``thresholds``. Strategies that read ``calibrated`` get, per question, the out-of-fold P(relevant) of
    each hit (``calibrated``: question_id -> array aligned with the trace's hits; computed here from the
    trace and the corpus's labels by ``bench.selection.relevance.out_of_fold`` when not given).

    Injected and full-context tokens of every format are priced by ``format_tokens``
    (``bench.selection.formats.token_table``), which equals the tiktoken count of the rendered text exactly:
    for format A, ``count("\\n".join(lines))`` of the selection's ``role: message`` lines, in
    selection order. ``format_tokens`` is required when ``formats`` names B or C. Without it
    (hand-made tests) format A is priced as the sum of ``token_counts`` (memory key -> tokens of
    its line) plus ``separator_tokens`` per newline, which is not the joined text's count.
    ``token_counts`` is also what ``needs_tokens`` strategies get as ``tokens=``.
    ``record`` (a dict the caller passes) receives the selections behind the rows: (strategy name, threshold
    rounded to 10 places or None) -> question id -> the selected memory ids (distinct, in selection order).
    ``shared`` (a dict the caller passes to several sweeps of the same trace, corpus and token tables, as ``run_job``
    does for the main sweep and ``format_tokens_table``): the per-question context and prefix arrays are built once.
    ``answer_coverage=False`` leaves ``answer_recall``/``answer_contained`` NaN (for side sweeps that report tokens only);
    ``answers`` is the corpus's ``AnswerIndex`` when the caller built it (once per corpus: it reads every text), else the
    sweep builds it.
    ``depth_saturated``: the strategy read the store, kept every candidate the store returned, and
    the store returned fewer memories than the question may see, so a deeper search could have
    changed the selection.
    """
    formats = check_formats(formats)
    if any(f != "A" for f in formats) and format_tokens is None:
        raise ValueError(f"sweep: formats {formats} need format_tokens (bench.selection.formats.token_table)")
    questions = {q.question_id: q for q in corpus.questions}
    roles = tuple(trace.meta["roles"]) if trace.meta.get("roles") else None

    exact_a = format_tokens is not None and "A" in format_tokens.joined

    def cost(fmt: str, ids: Sequence[str]) -> int:
        if fmt == "A" and not exact_a:
            return sum(map(token_counts.__getitem__, ids)) + separator_tokens * max(len(ids) - 1, 0)
        return format_tokens.cost(fmt, ids)

    key = (id(trace), id(corpus), id(token_counts), id(format_tokens), separator_tokens)
    prepared = shared.get("sweep") if shared is not None else None
    if prepared is None or prepared[0] != key:
        vis = Visibility(corpus, parse_filter(trace.meta.get("metadata_filter")))
        prepared = (key, (trace, corpus, token_counts, format_tokens), *_contexts(trace, corpus, questions, vis, roles), {"vis": vis})
        if shared is not None:
            shared["sweep"] = prepared  # the objects are held too: their ids stay theirs while the entry lives
    _, _, ctx, views, cache = prepared
    for eligible, full, seen in views.values():  # the full-context cost of each view, in every format asked
        for f in formats:
            if f not in full:
                full[f] = cost(f, seen)
    probs = None
    if any(s.calibrated for s in strategies):
        if calibrated is None:
            from bench.selection.relevance import out_of_fold

            calibrated = out_of_fold(trace.table, corpus)
        try:
            probs = [calibrated[c.question.question_id] for c in ctx]
        except KeyError as e:
            raise ValueError(f"sweep: no calibrated scores for question {e.args[0]!r} (field question_id)") from None
    cols: dict[str, list] = {c: [] for c in _COLS}  # column -> chunks (lists or arrays), one per (strategy, threshold)
    if not answer_coverage:
        answers = AnswerIndex({})
    elif answers is None:
        answers = AnswerIndex.build(corpus)  # answer coverage of each selection (bench.metrics.answers)
    tok: dict[str, list] = {f: [] for f in formats}  # format -> chunks
    order = replay_order([c.question for c in ctx])
    prefixes = None
    flip = flips_thresholds(trace)  # a distance basis (bench.selection.basis): scores are -d, a threshold t is -t
    for spec in strategies:
        seen = partial(_seen, flip and spec.threshold_on == "similarity")
        kind = spec.kind
        rule = _prefix_rule(spec)
        if rule is not None and prefixes is None:
            prefixes = cache.get("prefixes")
            if prefixes is None:
                prefixes = cache["prefixes"] = _Prefixes(ctx, cost, token_counts, separator_tokens, format_tokens, exact_a, cache["vis"])
        if rule is not None and spec.thresholded:
            prefixes.prepare([seen(t) for t in spec.thresholds or thresholds])
        for t in (spec.thresholds or thresholds) if spec.thresholded else (None,):
            chosen = None if record is None else record.setdefault((spec.name, None if t is None else round(float(t), 10)), {})
            if rule is not None:  # a prefix strategy: the first n hits, n for every question at once
                _prefix_rows(spec, rule, t, ctx, prefixes, cols, tok, formats, cost, answers, chosen, seen(t))
                continue
            if _is_full_context(spec):  # every memory the question may see: one selection per view
                _view_rows(spec, t, ctx, cols, tok, formats, cost, answers, chosen)
                continue
            state: dict[str, object] = {}
            results: list[Selection | None] = [None] * len(ctx)
            for i in order if spec.stateful else range(len(ctx)):
                c = ctx[i]
                kw = {"question": c.question, "eligible": c.eligible, "threshold": seen(t)}
                if spec.needs_tokens:
                    kw["tokens"] = token_counts
                if spec.calibrated:
                    kw["calibrated"] = probs[i]
                if spec.stateful:
                    kw["state"] = state.get(c.question.conversation_id)
                sel = _as_selection(spec.fn(c.hits, **kw))
                if spec.stateful:
                    state[c.question.conversation_id] = sel.state
                results[i] = sel
            loc: dict[str, list] = {c: [] for c in _COLS}
            ltok: dict[str, list] = {f: [] for f in formats}
            for i, sel in enumerate(results):
                c = ctx[i]
                ids = list(dict.fromkeys(sel.hits.ids if isinstance(sel.hits, Hits) else map(_ID, sel.hits)))
                if chosen is not None:
                    chosen[c.question.question_id] = tuple(ids)
                loc["strategy"].append(spec.name)
                loc["kind"].append(kind)
                loc["threshold"].append(NAN if t is None else t)
                loc["qi"].append(i)
                loc["n_selected"].append(len(ids))
                loc["n_correct"].append(len(c.gold.intersection(ids)))
                loc["latency_ns"].append(c.latency_ns if spec.uses_store else NAN)
                loc["depth_saturated"].append(spec.uses_store and 0 < len(c.hits) < len(c.eligible) and len(ids) >= len(c.hits)
                                              and set(c.hits.ids).issubset(ids))
                loc["route"].append(sel.route)
                if sel.tiers:
                    l1 = {h.id for h, tier in zip(sel.hits, sel.tiers) if tier == "L1"}
                    loc["l1_selected"].append(float(len(l1)))
                    loc["l1_correct"].append(float(len(c.gold & l1)))
                else:
                    loc["l1_selected"].append(NAN)
                    loc["l1_correct"].append(NAN)
                rec, cont = answers.score(c.question.question_id, ids)
                loc["answer_recall"].append(rec)
                loc["answer_contained"].append(cont)
                whole = len(ids) == len(c.seen) and tuple(ids) == c.seen  # full context: priced once per view above
                for f in formats:
                    ltok[f].append(c.full[f] if whole else cost(f, ids))
            for k, v in loc.items():
                cols[k].append(v)
            for f, v in ltok.items():
                tok[f].append(v)
    return _frame(trace, ctx, cols, tok, embedder)


def _seen(flip: bool, t):
    """The threshold a strategy compares its scores with: ``-t`` when the scores are negated distances."""
    return -t if flip and t is not None else t


def _prefix_rows(spec: StrategySpec, rule, t, ctx: list[_Ctx], pre: _Prefixes, cols: dict, tok: dict, formats, cost,
                 answers: AnswerIndex, chosen: dict | None, t_seen=None) -> None:
    """The rows of a prefix strategy at threshold ``t`` (compared with the scores as ``t_seen``: ``t`` unless the sweep
    negates it for a distance basis), the same as calling it question by question."""
    t_seen = t if t_seen is None else t_seen
    nq = len(ctx)
    idx = np.arange(nq)
    n = np.array(rule(pre.n_hits, pre.n_above(t_seen) if t is not None else np.zeros(nq, np.int64)), dtype=np.int64)  # a copy
    n_cor = pre.correct[idx, n]
    sat = n == pre.n_hits
    costs = {}
    for f in formats:
        table, slow = pre.tokens(f)
        costs[f] = table[idx, n]
        for i in np.flatnonzero(slow & ~pre.slow).tolist():
            costs[f][i] = cost(f, list(ctx[i].hits.ids[: n[i]]))
    rec, cont = pre.answers(answers)
    a_rec, a_cont = rec[idx, n], cont[idx, n]
    for i in np.flatnonzero(pre.slow).tolist():  # unsorted, non-finite, repeated or unknown hits: the function itself
        c = ctx[i]
        hits = spec.fn(c.hits, question=c.question, eligible=c.eligible, threshold=t_seen)
        ids = list(dict.fromkeys(hits.ids if isinstance(hits, Hits) else map(_ID, hits)))
        n[i], n_cor[i], sat[i] = len(ids), len(c.gold.intersection(ids)), set(c.hits.ids).issubset(ids)
        a_rec[i], a_cont[i] = answers.score(c.question.question_id, ids)
        for f in formats:
            costs[f][i] = cost(f, ids)
        if chosen is not None:
            chosen[c.question.question_id] = tuple(ids)
    if chosen is not None:
        for i in np.flatnonzero(~pre.slow).tolist():
            chosen[ctx[i].question.question_id] = tuple(ctx[i].hits.ids[: n[i]])
    _append(cols, tok, spec, t, n_sel=n, n_cor=n_cor, rec=a_rec, cont=a_cont, costs=costs,
            latency=pre.latency if spec.uses_store else np.full(nq, NAN),
            sat=(0 < pre.n_hits) & (pre.n_hits < pre.n_eligible) & (n >= pre.n_hits) & sat if spec.uses_store
            else np.zeros(nq, dtype=bool))


def _cat(chunks: list, dtype) -> np.ndarray:
    """One array of a column's chunks."""
    return np.concatenate([np.asarray(c, dtype=dtype) for c in chunks]) if chunks else np.zeros(0, dtype=dtype)


def _frame(trace: Trace, ctx: list[_Ctx], cols: dict, tok: dict, embedder: str | None) -> pd.DataFrame:
    qi = _cat(cols.pop("qi"), np.int64)
    qs = [c.question for c in ctx]
    n_sel = _cat(cols["n_selected"], np.int64)
    n_cor = _cat(cols["n_correct"], np.int64)
    n_gold = np.asarray([len(c.gold) for c in ctx], dtype=np.int64)[qi] if len(ctx) else np.zeros(0, np.int64)
    p, r, f1 = metrics.prf(n_sel, n_cor, n_gold)
    base = pd.DataFrame({
        "strategy": _cat(cols["strategy"], object),
        "kind": _cat(cols["kind"], object),
        "threshold": _cat(cols["threshold"], float),
        "question_id": [qs[i].question_id for i in qi],
        "conversation_id": [qs[i].conversation_id for i in qi],
        "category": [qs[i].category for i in qi],
        "adversarial": np.asarray([bool(qs[i].adversarial) for i in qi], dtype=bool),
        "n_gold": n_gold,
        "n_selected": n_sel,
        "n_correct": n_cor,
        "precision": p,
        "recall": r,
        "f1": f1,
        "hit": np.where(n_gold > 0, (n_cor > 0).astype(float), NAN),
        "empty": (n_sel == 0).astype(float),
        "tokens_injected": 0,
        "tokens_full": 0,
        "latency_ns": _cat(cols["latency_ns"], float),
        "depth_saturated": _cat(cols["depth_saturated"], bool),
        "route": _cat(cols["route"], object),
        "l1_selected": _cat(cols["l1_selected"], float),
        "l1_correct": _cat(cols["l1_correct"], float),
        "answer_recall": _cat(cols["answer_recall"], float),
        "answer_contained": _cat(cols["answer_contained"], float),
    })
    parts = []
    for f, values in tok.items():
        part = base.copy()
        part.insert(3, "format", f)
        part["tokens_injected"] = _cat(values, np.int64)
        part["tokens_full"] = np.asarray([c.full[f] for c in ctx], dtype=np.int64)[qi] if len(ctx) else np.zeros(0, np.int64)
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    out.insert(0, "layout", trace.meta.get("layout", "shared"))  # bench.backends.layout: shared | per_conversation
    out.insert(0, "backend", trace.meta["backend"])
    out.insert(0, "embedder", embedder or trace.meta["embedder"])
    out.insert(0, "dataset", trace.meta["dataset"])
    return out


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, embedder, backend, strategy, threshold, format), in sweep order.

    ``kind`` (after ``strategy``, when the rows have it) is what the strategy is: its function's name.
    A router's routes get rows of their own, named ``<strategy>/<route>`` with ``route`` set and
    ``question_share`` = their share of the strategy's questions (1.0 on ordinary rows). Beside the
    ``metrics.aggregate`` columns: ``noise_mean`` (non-gold memories injected per question),
    ``l1_selected_mean``, ``gold_via_l1`` / ``gold_via_l2`` (mean share of a question's gold recalled
    through tier L1 / the other tiers) and ``l2_noise_mean`` (non-gold injected outside L1), NaN for
    strategies without tiers; ``answer_recall`` / ``answer_contained`` (answer coverage of the injected context,
    ``bench.metrics.answers``) over the scored questions with an answer, counted in ``n_answer``. All over the scored questions (``metrics.scored``: non-adversarial with
    gold), like the main metrics, so they speak about the row's ``n_questions``. Two per-query
    diagnostics use every question of the row, like latency: ``question_share`` (routing applies to
    every question) and ``depth_saturated_rate`` (share of queries whose selection took every
    candidate the store returned while the store returned fewer memories than the question may see).
    """
    rows = rows.copy()
    if "route" not in rows:
        rows["route"] = ""
    for c in ("l1_selected", "l1_correct"):
        if c not in rows:
            rows[c] = NAN
    keys = [k for k in SUMMARY_KEYS if k in rows]
    parent_n = {_hashable(k): n for k, n in rows.groupby(keys, dropna=False, sort=False).size().items()}
    routed = rows[rows["route"] != ""]
    if len(routed):
        sub = routed.copy()
        sub["parent"] = sub["strategy"]
        sub["strategy"] = sub["strategy"] + "/" + sub["route"]
        rows = pd.concat([rows.assign(parent=rows["strategy"], route=""), sub], ignore_index=True)
    else:
        rows = rows.assign(parent=rows["strategy"], route="")
    summary = metrics.aggregate(rows, keys)
    answers = [c for c in ("answer_recall", "answer_contained") if c in rows]
    used = ["route", "parent", "adversarial", "depth_saturated", "n_selected", "n_correct", "n_gold", "l1_selected", "l1_correct", *answers]
    if "kind" in rows:
        used.append("kind")
    scored_mask = metrics.scored(rows).to_numpy()
    col = {c: rows[c].to_numpy() for c in dict.fromkeys(keys + used)}
    mean = metrics.series_mean
    extra, kinds = [], []
    for idx in metrics.group_rows(rows, keys):  # the groupby's groups, as numpy positions (same numbers as pandas per group)
        first = idx[0]
        if "kind" in col:
            kinds.append(col["kind"][first])
        main = idx[scored_mask[idx]]
        noise = col["n_selected"][main] - col["n_correct"][main]
        n_gold = col["n_gold"][main]
        gold = np.where(n_gold > 0, n_gold, np.nan)  # Series.where: the ints as float64, NaN where not > 0
        l1s, l1c = col["l1_selected"][main], col["l1_correct"][main]
        tiered = bool((~pd.isna(l1s)).any())
        route = col["route"][first]
        parent_key = tuple(col["parent"][first] if k == "strategy" else col[k][first] for k in keys)
        extra.append({
            "route": route,
            "question_share": len(idx) / parent_n[_hashable(parent_key)] if route else 1.0,
            "depth_saturated_rate": mean(col["depth_saturated"][idx]),
            "noise_mean": mean(noise) if len(main) else NAN,
            "l1_selected_mean": mean(l1s) if tiered else NAN,
            "gold_via_l1": mean(l1c / gold) if tiered else NAN,
            "gold_via_l2": mean((col["n_correct"][main] - l1c) / gold) if tiered else NAN,
            "l2_noise_mean": mean(noise - (l1s - l1c)) if tiered else NAN,
            **({"n_answer": int((~pd.isna(col["answer_recall"][main])).sum()), "answer_recall": mean(col["answer_recall"][main]),
                "answer_contained": mean(col["answer_contained"][main])} if answers else {}),  # bench.metrics.answers
        })
    extra = pd.DataFrame(extra, index=summary.index)
    summary = pd.concat([summary, extra], axis=1)
    if kinds:  # what each strategy is (its function's name), beside its configured name
        summary.insert(summary.columns.get_loc("strategy") + 1, "kind", kinds)
    return summary


def _hashable(key) -> tuple:
    """A group key with NaN replaced by None (NaN != NaN, so it cannot be looked up in a dict)."""
    key = key if isinstance(key, tuple) else (key,)
    return tuple(None if isinstance(v, float) and v != v else v for v in key)


# The code-agent article's threshold table, re-priced in every injection format (report: seed claims). Keyed by what
# a strategy is (``StrategySpec.kind``, the rows' ``kind``: its function's name), whatever its configured name;
# values: the thresholds to price (None: a strategy without one).
FORMAT_SEED = {"threshold": (0.1, 0.3, 0.5, 0.7), "limit": (None,), "full_context": (None,)}


def format_tokens_table(trace: Trace, corpus: Corpus, strategies: Sequence[StrategySpec], token_counts: Mapping[str, int],
                        table: TokenTable, *, embedder: str | None = None, seed: Mapping[str, tuple] = FORMAT_SEED,
                        shared: dict | None = None) -> list[dict]:
    """Mean injected tokens per format A/B/C for the strategies whose kind is in ``seed`` (at its thresholds).

    A small side sweep so the report can quote format costs even when the main sweep prices format A
    only. Records: strategy, kind, threshold, format, tokens_injected_mean, tokens_full_mean, token_savings, recall.
    """
    chosen = [s for s in strategies if s.kind in seed and not s.stateful and any((t is None) != s.thresholded for t in seed[s.kind])]
    if not chosen:
        return []
    thresholds = sorted({t for s in chosen if s.thresholded for t in seed[s.kind] if t is not None})
    rows = sweep(trace, corpus, chosen, thresholds, token_counts, embedder=embedder, formats=("A", "B", "C"), format_tokens=table,
                 answer_coverage=False, shared=shared)
    keep = pd.Series([t != t or t in seed[k] for k, t in zip(rows["kind"], rows["threshold"])], index=rows.index)
    s = summarise(rows[keep])
    cols = ["dataset", "embedder", "backend", "strategy", "kind", "threshold", "format", "tokens_injected_mean", "tokens_full_mean",
            "token_savings", "recall"]
    return [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in s[cols].to_dict("records")]
