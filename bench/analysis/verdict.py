"""The verdict: whether the data is enough to say "use X", and if not, how much more would be.

One rule, stated once and used by the report's headline and the console. Every comparison is the paired
t test over conversations of ``bench.analysis.stats.paired_t_test`` (per-question differences summed per
conversation, cluster-robust standard error, conversations - 1 degrees of freedom; its interval excludes 0
exactly when its p does), Holm-corrected per dataset (``stats.compare_pairs``):

- **use**: the data has at least ``min_conversations`` conversations; the recommended point's threshold is
  chosen in at least ``min_stable_share`` of the bootstrap resamples (or it has no threshold); and the
  runner-up (the configuration closest to it in the primary metric) scores differently on at least
  ``min_untied`` questions and is significantly worse (Holm p < alpha), or there is no runner-up;
- **too little data**: otherwise; the headline names both candidates (below ``min_conversations``: the
  number of conversations and the best so far) and the reasons say why, never "use";
- **none**: no configuration meets the constraints.

Power, from the same test: with the observed difference ``d`` and its standard error ``se`` on ``G``
conversations, ``G'`` conversations like these (same spread between conversations, same sizes) give
se' = se * sqrt((G - 1) / (G' - 1)) (the CR1 variance), and the difference becomes significant at the first
``G'`` with t_{G'-1} quantile * se' < |d|, at the runner-up's Holm level (alpha / the number of comparisons
with a p at least as large). The data also has to reach ``min_conversations`` and ``min_untied`` questions
that score differently (at the observed rate of such questions): the estimate is the largest of the three.
``d = 0`` or every question tied: more data of the same kind cannot separate them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import pandas as pd

from bench.embedders.names import short_name, shorten
from bench.output import md_code, md_text

CAP = 1_000_000  # conversations: beyond this the power estimate says "more than a million"


@dataclass(frozen=True)
class Verdict:
    kind: str  # use | too_little_data | none
    headline: str  # one sentence (Markdown backticks, no bold)
    reasons: tuple[str, ...] = ()
    more_conversations: float = math.nan  # NaN: not estimated; inf: more data like this would not separate them
    more_questions: float = math.nan


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _n(x) -> int:
    return 0 if _nan(x) else int(x)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _num(t: float) -> str:
    return f"{t:.2f}" if math.isclose(t, round(t, 2), abs_tol=1e-9) else f"{t:.3g}"


def setting_name(record: Mapping | None, threshold: float | None = None) -> str:
    """What a strategy at a threshold does, in words (``record``: its strategies.json entry, with ``kind`` and
    ``params``): ``top-5``, ``similarity ≥ 0.20, at most 5``, ``top-1`` for a relative cut at
    delta 0.00 or ratio 1.00. "" for a strategy it does not know (the report then shows its configured name only)."""
    if not record:
        return ""
    kind, params = record.get("kind"), dict(record.get("params") or {})
    k, t = params.get("k"), None if _nan(threshold) else float(threshold)
    roles = record.get("roles") or []
    only = f" ({'/'.join(roles)} turns only)" if roles else ""
    top1 = "top-1"
    if kind == "limit":
        text = f"top-{k}" if k is not None else "top-k"
    elif kind == "threshold":
        text = f"similarity ≥ {_num(t)}" if t is not None else "similarity threshold"
    elif kind == "hybrid":
        text = f"top-{k} with similarity ≥ {_num(t)}" if t is not None else f"top-{k} above a threshold"
    elif kind == "relative_delta":
        text = "within a delta of the best match" if t is None else (top1 if t <= 0 else f"similarity ≥ best − {_num(t)}")
    elif kind == "relative_ratio":
        text = "a share of the best similarity" if t is None else (top1 if t >= 1 else f"similarity ≥ {_num(t)} × best")
    elif kind == "calibrated_threshold":
        text = f"calibrated P(relevant) ≥ {_num(t)}" if t is not None else "calibrated P(relevant) threshold"
    elif kind == "largest_gap":
        text = f"cut at the largest similarity drop in the top {k}"
    elif kind == "full_context":
        text = "full context (every earlier turn)"
    elif kind == "recency":
        text = f"last {k} turns"
    elif kind == "keyword":
        text = f"keyword match, newest {k}"
    elif kind == "bm25":
        text = f"BM25 top-{k}"
    elif kind == "rrf":
        text = f"vector + BM25 fusion, top-{k}"
    elif kind == "token_budget":
        text = f"best first within {params.get('budget')} tokens"
    elif kind == "dual_tier":
        text = f"last {params.get('l1_turns')} turns + similarity ≥ {_num(t)}" if t is not None else "dual tier"
    elif kind == "route_by_query":
        text = "routed by question type"
    else:
        return ""
    return text + only


def configured(p: Mapping) -> str:
    """The configured name of ``p``'s strategy, with its threshold unless its ``setting`` already says it."""
    t = p.get("threshold")
    said = _nan(t) or _num(float(t)) in str(p.get("setting") or "").replace("top-1", "")
    return md_code(p["strategy"]) + ("" if said else f" at {_num(float(t))}")


def point_label(p: Mapping, like: Mapping | None = None, short: Mapping[str, str] | None = None) -> str:
    """What it does (`strategy` at t) on `store` / `embedder`; the store and embedder only where they differ from ``like``'s
    (the embedder by its short name, ``short``: a ``bench.embedders.names.shorten`` mapping; the report's legend maps it
    back to the full identity). Names come from data: in a code span they cannot leave."""
    setting = p.get("setting")
    if isinstance(setting, str) and setting:  # what it does, then its configured name
        what = f"{md_text(setting)} ({configured(p)})"
    else:
        what = md_code(p["strategy"]) + ("" if _nan(p.get("threshold")) else f" at {p['threshold']:.2f}")
    where = [md_code(short_name(p[k], short) if k == "embedder" else p[k]) for k in ("backend", "embedder")
             if like is None or p.get(k) != like.get(k)]
    return what + (f" on {' / '.join(where)}" if where else "")


def conversations_for_significance(*, diff: float, se: float, n_conversations: int, level: float) -> float:
    """The smallest number of conversations G' >= G like these at which the paired t test of ``diff`` is
    significant at ``level`` (module docstring); inf when ``diff`` is 0 or more than a million would be needed,
    NaN when ``se`` is unknown (fewer than 2 conversations)."""
    from scipy import stats as sstats

    g = n_conversations
    if any(_nan(x) for x in (diff, se, level)) or g < 2:
        return math.nan
    if diff == 0:
        return math.inf

    def clears(n: int) -> bool:
        return float(sstats.t.ppf(1 - level / 2, n - 1)) * se * math.sqrt((g - 1) / (n - 1)) < abs(diff)

    if clears(g):
        return float(g)
    if not clears(CAP):
        return math.inf
    lo, hi = g, CAP  # clears(lo) is False, clears(hi) is True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if clears(mid) else (mid, hi)
    return float(hi)


def more_data(r: Mapping, *, n_conversations: int, n_questions: int, min_conversations: int, min_untied: int,
              alpha: float) -> tuple[float, float, str]:
    """(more conversations, more questions, the sentence) for the comparison ``r`` (a ``stats.compare_pairs`` row,
    or None without a runner-up) to pass the rule of the module docstring; NaN and "" when nothing is missing."""
    g, per_conv = n_conversations, n_questions / max(n_conversations, 1)
    if r is None:
        if g >= min_conversations:
            return math.nan, math.nan, ""
        more = min_conversations - g
        return (float(more), float(math.ceil(more * per_conv)),
                f"about {_plural(more, 'more conversation')} (~{math.ceil(more * per_conv):,} labelled questions) like these would reach "
                f"the {min_conversations} a choice needs")
    n, untied, d = _n(r.get("n")), _n(r.get("wins")) + _n(r.get("losses")), r.get("diff")
    if untied == 0:
        return math.inf, math.inf, f"they score the same on all {_plural(n, 'question')}: more data like these would not separate them"
    if d == 0:
        return math.inf, math.inf, "their mean difference is 0 on these questions: more data like these would not separate them"
    if g < 2:
        more = min_conversations - g
        return (math.nan, math.nan,
                f"label at least {_plural(more, 'more conversation')} (~{math.ceil(more * per_conv):,} questions) like these "
                f"before a test can decide: with {g} the spread between conversations is unknown")
    level = r.get("holm_level")
    level = alpha if _nan(level) else float(level)
    g_test = g if bool(r.get("significant")) else conversations_for_significance(
        diff=float(d), se=float(r.get("se", math.nan)), n_conversations=g, level=level)
    g_untied = math.ceil(min_untied * g / untied)
    need = max(g_test, g_untied, min_conversations)
    if need == math.inf:
        return (math.inf, math.inf, f"more than {CAP:,} conversations like these would be needed for the observed difference "
                                    f"({d:+.3g}) to be significant: more data like these would not separate them")
    if _nan(need) or need <= g:
        return math.nan, math.nan, ""
    more = int(need) - g
    why = []
    if g_test > g:
        why.append(f"at {int(g_test)} conversations the observed difference would be significant (t test at the Holm level "
                   f"{level:.2g}), if it holds")
    if g_untied > g:
        why.append(f"{g_untied} give {min_untied} questions that score differently at the observed rate ({untied} of {n})")
    if min_conversations > g:
        why.append(f"a choice needs {min_conversations} conversations")
    return (float(more), float(math.ceil(more * per_conv)),
            f"about {_plural(more, 'more conversation')} (~{math.ceil(more * per_conv):,} labelled questions) like these would be "
            f"needed: {'; '.join(why)}")


def versus(r: Mapping, best: Mapping, *, metric: str, alpha: float, short: Mapping[str, str] | None = None) -> str:
    """The runner-up comparison in words: the difference with its interval, the test's p and Holm p."""
    d, g = r.get("diff"), _n(r.get("n_conversations"))
    who = f"the runner-up {point_label(r['b'], best, short)}"
    if _nan(d):
        return f"{who} could not be compared (no common questions)"
    if g < 2 or _nan(r.get("p")):
        return f"{who}: {metric} difference {d:+.3f} (no interval with 1 conversation, so no test)"
    sig = bool(r.get("significant"))
    return (f"{who} is {'' if sig else 'not '}significantly worse ({metric} difference {d:+.3f} "
            f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], t test over {g} conversations p {r['p']:.2g}, "
            f"Holm p {r['p_holm']:.2g} {'<' if sig else '≥'} {alpha:g})")


def _ms(x) -> str:
    return "n/a" if _nan(x) else (f"{x:.2f}" if x < 10 else f"{x:,.0f}" if x >= 100 else f"{x:.1f}")


def tie_sentence(best: Mapping, ties: list[Mapping], n: int, short: Mapping[str, str] | None = None) -> str:
    """``best`` and the configurations ``ties`` that score the same on all ``n`` questions, in words, with the store
    latency (p50 / p99 of every query) that then decides."""
    names = ", ".join(point_label(t, best, short) for t in ties)
    stores = list(dict.fromkeys([best.get("backend"), *(t.get("backend") for t in ties)]))
    if len(stores) < 2:
        return f"it ties with {names} on every one of the {_plural(n, 'question')} (same store: either)"
    lat = {}
    for p in (best, *ties):
        lat.setdefault(p.get("backend"), (p.get("latency_p50_ms"), p.get("latency_p99_ms")))
    known = {k: v for k, v in lat.items() if not _nan(v[1])}
    fastest = min(known, key=lambda k: known[k][1]) if len(known) == len(lat) else None
    which = f"; fastest at p99: {md_code(fastest)}" if fastest is not None else ""
    return (f"it ties with {names} on every one of the {_plural(n, 'question')}, so the store's latency decides "
            f"(p50 / p99 per query: {', '.join(f'{md_code(k)} {_ms(v[0])} / {_ms(v[1])} ms' for k, v in lat.items())}{which})")


def verdict(best: Mapping | None, runner_up: Mapping | None, *, min_stable_share: float, alpha: float, metric: str,
            min_conversations: int, min_untied: int, ties: list[Mapping] = (), n_tied: int = 0, goal: str = "",
            closest: Mapping | None = None, short: Mapping[str, str] | None = None) -> Verdict:
    """``best``: the recommended point (recommendation.csv row); ``runner_up``: its ``stats.compare_pairs`` row against
    the closest configuration that does not tie with it (``a`` = best, ``b`` = runner-up), or None; ``ties``: the points
    of the configurations that score the same as ``best`` on all ``n_tied`` questions (said as a tie, with the latency
    that decides); ``goal``: the objective in words; ``closest``: the highest-recall setting when none reaches the recall
    target (a ``shortlist`` row); ``short``: the run's embedders' short names (``bench.embedders.names.shorten``). The
    rule is the module docstring's."""
    if best is None:
        if closest is not None and not _nan(closest.get("target_recall")):
            return Verdict("none", f"no tried setting reaches recall {closest['target_recall']:.2f}; the closest is "
                                   f"{point_label(closest, short=short)}: recall {closest['recall']:.3f} at {closest['tokens']:,.0f} tokens "
                                   "(lower `recommend.min_recall`, or try other settings)")
        return Verdict("none", "no configuration meets the constraints: relax them")
    g = _n(best.get("n_conversations"))
    few = g < min_conversations
    reasons = [f"{_plural(g, 'conversation')}: a choice needs at least {min_conversations} (`recommend.min_conversations`)"] if few else []
    share = best.get("threshold_share")
    if not _nan(share) and share < min_stable_share:
        reasons.append(f"{best['threshold']:.2f} is chosen in only {share:.0%} of bootstrap resamples (a stable choice: ≥ {min_stable_share:.0%})")
    close = False  # the runner-up is not separated from the best
    if runner_up is not None:
        untied = _n(runner_up.get("wins")) + _n(runner_up.get("losses"))
        if few or not bool(runner_up.get("significant")):
            reasons.append(versus(runner_up, best, metric=metric, alpha=alpha, short=short))
            close = not bool(runner_up.get("significant"))
        if untied < min_untied:
            reasons.append(f"only {untied} of {_plural(_n(runner_up.get('n')), 'question')} score differently between them "
                           f"(a choice needs at least {min_untied}: `recommend.min_untied`)")
            close = True
    tie = f"; {tie_sentence(best, list(ties), n_tied, short)}" if ties else ""
    if not reasons:
        return Verdict("use", f"use {point_label(best, short=short)}" + (f" ({goal})" if goal else "") + tie)
    if few:
        head = f"{_plural(g, 'conversation')}: too few to choose; best so far {point_label(best, short=short)}"
    elif close:
        head = f"too little data to choose between {point_label(best, short=short)} and {point_label(runner_up['b'], best, short)}"
    else:
        head = f"too little data to be sure of the threshold of {point_label(best, short=short)}"
    head += tie
    more_c, more_q, text = more_data(runner_up, n_conversations=g, n_questions=_n(best.get("n_questions")),
                                     min_conversations=min_conversations, min_untied=min_untied, alpha=alpha)
    if text:
        reasons.append(text)
    return Verdict("too_little_data", head, tuple(reasons), more_c, more_q)


def test_description(cfg, metric: str, n_pairs: str) -> str:
    """What the paired test is, in one paragraph: the significance table's and ``recallbench compare``'s."""
    return (f"Paired t test of the mean per-question {metric} difference A − B over conversations: the differences are "
            "summed per conversation, the standard error is cluster-robust (CR1) and the t distribution has "
            f"conversations − 1 degrees of freedom, so questions of one conversation do not count as independent evidence "
            f"(no test with 1 conversation). The {cfg.confidence:.0%} CI is the same t interval, not Holm-adjusted: it excludes 0 "
            f"exactly when p < {1 - cfg.confidence:.2g}. Holm p adjusts p for the {n_pairs} and decides "
            f"significance at {cfg.alpha:g}. W/T/L = questions where A wins/ties/loses.")


SAME = ("f1", "recall", "tokens")  # a tie on the test's metric is a tie only when these means agree too


def split_ties(points: pd.DataFrame, sig: pd.DataFrame, best: Mapping | None) -> tuple[list[dict], int, pd.DataFrame]:
    """(the points of the configurations that tie with ``best``, the number of questions they tie on, the rows of ``sig``
    without them). A tie: the paired test's metric is the same on every common question (W/T/L 0/n/0) and the mean F1,
    recall and tokens agree; it is said as a tie, not as "too little data". ``points``, ``sig``: one dataset's."""
    if best is None or sig is None or not len(sig):
        return [], 0, sig
    ties, n, drop = [], 0, []
    for i, r in sig.iterrows():
        if not (_n(r.get("n")) > 0 and _n(r.get("wins")) + _n(r.get("losses")) == 0):
            continue
        other = points[(points[["embedder", "backend", "strategy"]] == pd.Series({k: r["b"][k] for k in ("embedder", "backend", "strategy")})).all(axis=1)]
        if len(other) and all((_nan(best.get(m)) and _nan(other.iloc[0][m])) or
                              math.isclose(float(other.iloc[0][m]), float(best[m]), rel_tol=1e-9, abs_tol=1e-12) for m in SAME):
            ties.append(other.iloc[0].to_dict())
            n = max(n, _n(r["n"]))
            drop.append(i)
    return ties, n, sig.drop(index=drop)


def runner_up(sig: pd.DataFrame) -> Mapping | None:
    """The significance row of the configuration closest to the recommendation in the primary metric (pass the rows
    without the ties, ``split_ties``: a tie is said as a tie); None when there is none."""
    if sig is None or not len(sig):
        return None
    return sig.loc[sig["mean_b"].sub(sig["mean_a"]).abs().sort_values(kind="stable").index[0]].to_dict()


def verdict_table(points: pd.DataFrame, sig: pd.DataFrame, cfg, *, metric: str, shortlist: pd.DataFrame | None = None,
                  short: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One verdict per dataset of ``points`` (recommendation rows with ``best``) and ``sig`` (significance rows
    with ``dataset``) under ``cfg`` (a ``RecommendConfig``; ``shortlist``: ``recommend.shortlist``'s rows, for the
    setting closest to the recall target when none reaches it): columns dataset, kind, headline, reasons (joined
    with "; "), more_conversations, more_questions, tied_with (the tied configurations' stores, "; "-joined). ``short``:
    the run's embedders' short names (``bench.embedders.names.shorten``; None: each name shortened alone)."""
    out = []
    for ds, pts in points.groupby("dataset", sort=False):
        best = pts[pts["best"]]
        s = sig[sig["dataset"] == ds] if len(sig) else sig
        b = best.iloc[0].to_dict() if len(best) else None
        ties, n_tied, rest = split_ties(pts, s, b)
        if rest is not None and len(rest):  # each compared configuration named for what it does, as the recommendation
            setting = {tuple(r[k] for k in ("embedder", "backend", "strategy")): r.get("setting") for _, r in pts.iterrows()}
            rest = rest.assign(b=[{**d, "setting": setting.get(tuple(d[k] for k in ("embedder", "backend", "strategy")))}
                                  if isinstance(d, Mapping) else d for d in rest["b"]])
        sl = shortlist[(shortlist["dataset"] == ds) & (shortlist["role"] == "closest")] if shortlist is not None and len(shortlist) else None
        v = verdict(b, runner_up(rest),
                    min_stable_share=cfg.min_stable_share, alpha=cfg.alpha, metric=metric, min_conversations=cfg.min_conversations,
                    min_untied=cfg.min_untied, ties=ties, n_tied=n_tied, goal=cfg.short(),
                    closest=sl.iloc[0].to_dict() if sl is not None and len(sl) else None, short=short)
        out.append({"dataset": ds, **asdict(v), "reasons": "; ".join(v.reasons),
                    "tied_with": json.dumps([[str(t[k]) for k in ("embedder", "backend", "strategy")] for t in ties]) if ties else ""})
    return pd.DataFrame(out, columns=["dataset", "kind", "headline", "reasons", "more_conversations", "more_questions", "tied_with"])


# --------------------------------------------------------------------------- the first screen

def _iv(v, lo, hi, fmt: str) -> str:
    if _nan(v):
        return "n/a"
    return format(v, fmt) + ("" if _nan(lo) else f" [{format(lo, fmt)}, {format(hi, fmt)}]")


@dataclass(frozen=True)
class FirstScreen:
    """What a sweep shows first for one dataset: the verdict, the "what to ship" table and one line on what its
    intervals are about (``first_screen``). Text in Markdown (backticks); the console drops the backticks."""

    dataset: str
    headline: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    about: str  # what the intervals are about, and the size of the data
    kind: str
    reasons: str


def first_screen(v: Mapping, shortlist: pd.DataFrame, points: pd.DataFrame, cfg) -> FirstScreen:
    """The first screen of dataset ``v["dataset"]`` (``v``: a ``verdict_table`` row; ``shortlist``: ``recommend.shortlist``'s
    rows; ``points``: recommendation.csv; ``cfg``: the ``RecommendConfig``): the shortlist's rows (recommended, fewest tokens
    at the recall target, best F1, or the highest recall when nothing reaches the target) and the configurations that
    tie with the recommendation, each with recall and tokens with their prediction interval, F1 and the store latency."""
    ds = v["dataset"]
    sl = shortlist[shortlist["dataset"] == ds] if shortlist is not None and len(shortlist) else pd.DataFrame()
    pts = points[points["dataset"] == ds]
    rows = [r for _, r in sl.iterrows()]
    tied = json.loads(v["tied_with"]) if isinstance(v.get("tied_with"), str) and v.get("tied_with") else []
    for emb, be, strat in tied:
        hit = pts[(pts["embedder"] == emb) & (pts["backend"] == be) & (pts["strategy"] == strat)]
        if len(hit):
            rows.insert(1, hit.iloc[0].copy())
            rows[1]["what"] = "ties with the recommended on every question"
    multi = pts["embedder"].nunique() > 1
    short = shorten(pts["embedder"].unique())  # the report's legend maps them back to full identities
    conf = f"{cfg.confidence:.0%}".replace("%", " %")
    header = ("what", "setting", "store", *(("embedder",) if multi else ()), f"recall [{conf}]", f"tokens [{conf}]", "F1",
              "p50 / p99 ms")
    out = []
    for r in rows:
        name = configured(r)
        setting = f"{md_text(r['setting'])} ({name})" if isinstance(r.get("setting"), str) and r.get("setting") else name
        out.append((md_text(r["what"]), setting, md_code(r["backend"]), *((md_code(short.get(str(r["embedder"]), r["embedder"])),) if multi else ()),
                    _iv(r["recall"], r.get("recall_pred_lo"), r.get("recall_pred_hi"), ".3f"),
                    _iv(r["tokens"], r.get("tokens_pred_lo"), r.get("tokens_pred_hi"), ",.0f"),
                    "n/a" if _nan(r.get("f1")) else f"{r['f1']:.3f}", f"{_ms(r.get('latency_p50_ms'))} / {_ms(r.get('latency_p99_ms'))}"))
    g = _n(rows[0]["n_conversations"]) if rows else 0
    nq = _n(rows[0]["n_questions"]) if rows else 0
    k = int(cfg.new_conversations or g)
    if g >= 2:
        about = (f"[ ] = {conf} prediction interval: where the mean over a new corpus of {_plural(k, 'conversation')} like these "
                 f"should land (measured on {_plural(nq, 'question')} in {_plural(g, 'conversation')})")
    else:
        about = f"no interval: {_plural(g, 'conversation')} says nothing about how another one would score ({_plural(nq, 'question')})"
    if cfg.min_recall is not None:
        about += f"; recall target {cfg.min_recall:.2f} (`recommend.min_recall`)"
    about += "; p50 / p99 = store search time per query"
    return FirstScreen(ds, str(v["headline"]), header, tuple(out), about, str(v["kind"]),
                       "" if _nan(v.get("reasons")) else str(v.get("reasons") or ""))
