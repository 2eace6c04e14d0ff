"""Report sections for the recall strategies: side-by-side table, routing, dual tier, formats, units,
and the claims of the strategy articles measured on the run's data (one section each, every configuration in one table).

Owns ``strategy_sections(summary, jobs, strategies) -> list[str]`` (markdown lines, called by
``bench.report.write_report``). Reads tables only: ``summary`` is summary.csv, ``jobs`` the job
metadata (meta.json / jobs.json; its ``format_tokens`` records come from
``bench.selection.sweep.format_tokens_table``), ``strategies`` the run's strategies.json records. A seed's
setting is found by what a strategy is, never by its name: ``SEEDS`` maps each setting to a
strategy kind (its function) and parameters, e.g. the limit strategy with k=5; rows are labelled
with the names the user configured. A section whose strategies were not run is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from bench.output import md_text as E
from bench.results.rundir import strategy_names

GROUP = ["dataset", "embedder", "backend"]
SEEKDB_THRESHOLD = 0.65  # the seekdb agent-memory article's threshold
DUAL_TIER_THRESHOLDS = (0.70, 0.75)  # grid points around the L1/L2 article's 0.72
CODE_AGENT_THRESHOLDS = (0.1, 0.3, 0.5, 0.7)  # the code-agent article's threshold table
CLAIMED_NOISE_CUT = 0.34  # "34 % less noise" (L1/L2 article)
RAW_TURNS = "locomo"  # the raw-turn dataset the unit corpora are compared with

# The seed articles' settings, as (kind, role filter, parameters): the kind is the strategy's function
# (``StrategySpec.kind``), the parameters a subset of its bound ones (``StrategySpec.params``).
SEEDS = {
    "limit5": ("limit", None, {"k": 5}),
    "threshold": ("threshold", None, {}),
    "hybrid5": ("hybrid", None, {"k": 5}),
    "routing": ("route_by_query", ("user",), {"profile_k": 3, "other_threshold": 0.65, "other_k": 5}),
    "dual_tier": ("dual_tier", None, {"l1_turns": 5}),
    "keyword5": ("keyword", None, {"k": 5}),
    "full_context": ("full_context", None, {}),
    "bm25_5": ("bm25", None, {"k": 5}),
}
FORMAT_SEEDS = {"threshold": CODE_AGENT_THRESHOLDS, "limit5": (None,), "full_context": (None,)}  # formats B/C are priced at these
UNIT_SEEDS = ("limit5", "hybrid5", "threshold", "full_context", "bm25_5")  # compared across memory units


def seed_name(strategies: Sequence[dict], seed: str) -> str | None:
    """The configured name of the run's strategy that is the seed setting ``seed`` (a key of SEEDS), None if not run."""
    kind, roles, params = SEEDS[seed]
    names = strategy_names(strategies, kind, roles=roles, **params)
    return names[0] if names else None


def _f(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, (float, int)) and not isinstance(x, bool):
        return f"{x:.{digits}f}"
    return str(x)


def _pct(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.0f} %"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _fmt_a(summary: pd.DataFrame) -> pd.DataFrame:
    s = summary.copy()
    if "format" in s:
        s = s[s["format"].fillna("A") == "A"]
    if "route" not in s:
        s["route"] = ""
    s["route"] = s["route"].astype(object).where(s["route"].notna(), "")
    return s


def _row(g: pd.DataFrame, strategy: str | None, threshold: float | None = None):
    s = g[g["strategy"] == strategy]
    if threshold is None:
        s = s[s["threshold"].isna()]
    else:
        s = s[(s["threshold"] - threshold).abs() < 1e-9]
    return s.iloc[0] if len(s) else None


def _best(g: pd.DataFrame, strategy: str):
    s = g[(g["strategy"] == strategy) & g["f1"].notna()]
    return s.loc[s["f1"].idxmax()] if len(s) else None


ARTICLES_TITLE = "Claims from strategy articles, measured on your data"


def strategy_sections(summary: pd.DataFrame, jobs: Sequence[dict], strategies: Sequence[dict]) -> list[str]:
    """Markdown lines: the strategy articles' claims measured on this run, then the per-strategy sections; each section
    once, its rows for every dataset / embedder / store in one table (a leading ``configuration`` column when the run
    has more than one)."""
    from bench.report.names import config

    s = _fmt_a(summary)
    multi_emb = s["embedder"].nunique() > 1
    groups = list(s.groupby(GROUP, sort=False))
    merged: dict[str, tuple[list[str], list[list[str]]]] = {}  # section title -> (lines before its table, tagged tables)
    for key, g in groups:
        ds, emb, be = key
        tag = E(" / ".join([*([str(ds)] if s["dataset"].nunique() > 1 else []), config(emb, be, multi_embedder=multi_emb)]))
        fmt_records = [r for j in jobs for r in (j.get("format_tokens") or []) if all(r.get(k) == v for k, v in zip(GROUP, key))]
        parts = [[f"## {ARTICLES_TITLE}", ""] + seed_table(g, fmt_records, strategies) + [""]]
        parts += [side_by_side(g), routing_section(g, strategies), dual_tier_section(g, strategies),
                  format_section(summary, fmt_records, key, strategies)]
        for part in parts:
            if part:
                _merge_into(merged, part, tag if len(groups) > 1 else None)
    lines: list[str] = []
    for head, tables in merged.values():
        lines += head
        header = next((t[:2] for t in tables if len(t) >= 2), [])
        if header:
            lines += header + [row for t in tables for row in t[2:]]
        else:
            lines += [row for t in tables for row in t]
        lines.append("")
    lines += units_section(s, strategies)
    return lines


def _merge_into(merged: dict, part: list[str], tag: str | None) -> None:
    """Add one group's section (``## title``, prose, one table) to ``merged``: its table rows get a first cell ``tag``."""
    title = part[0]
    body = part[1:]
    first = next((i for i, x in enumerate(body) if x.startswith("|")), len(body))
    head, table = body[:first], [x for x in body[first:] if x.startswith("|")]
    if not table:  # prose only: kept once per group
        head, table = [""], [f"{tag}: {x}" if tag and x else x for x in body if x]
    elif tag:
        table = ["| configuration " + table[0], "|---" + table[1], *[f"| {tag} " + x for x in table[2:]]]
    if title not in merged:
        merged[title] = ([title, *[x for x in head]], [])
    merged[title][1].append(table)


METRIC_HEADER = ["recall", "precision", "F1", "tokens/question", "token savings", "noise/question"]


def _metrics(r) -> list[str]:
    return [_f(r["recall"]), _f(r["precision"]), _f(r["f1"]), _f(r["tokens_injected_mean"], 1), _f(r["token_savings"]), _f(r.get("noise_mean"), 2)]


def seed_table(g: pd.DataFrame, fmt_records: Sequence[dict], strategies: Sequence[dict]) -> list[str]:
    rows = []
    name = {seed: seed_name(strategies, seed) for seed in SEEDS}
    limit, thr, hybrid, router, dual, keyword = (name[k] for k in ("limit5", "threshold", "hybrid5", "routing", "dual_tier", "keyword5"))

    def add(seed: str, claim: str, setting: str, r, note: str = "") -> None:
        if r is not None:
            rows.append([seed, claim, setting, *_metrics(r), note])

    add("seekdb agent-memory", "limit-5 recall saves tokens", E(limit), _row(g, limit))
    add("seekdb agent-memory", "a similarity threshold saves tokens", f"{E(thr)} >= {SEEKDB_THRESHOLD:.2f}", _row(g, thr, SEEKDB_THRESHOLD))
    add("seekdb agent-memory", "threshold capped at 5", f"{E(hybrid)} >= {SEEKDB_THRESHOLD:.2f}", _row(g, hybrid, SEEKDB_THRESHOLD))
    r = _row(g, router)
    if r is not None:
        parts = [f"{route}: share {_f(p['question_share'], 2)}, recall {_f(p['recall'])}"
                 for route in ("profile", "other") if (p := _row(g, f"{router}/{route}")) is not None]
        add("seekdb agent-memory", "route profile questions to limit-3, others to >= 0.65 cap 5 (user-only)", E(router), r, "; ".join(parts))
    best = _best(g, dual)
    extra = () if best is None or any(abs(best["threshold"] - t) < 1e-9 for t in DUAL_TIER_THRESHOLDS) else (float(best["threshold"]),)
    for t in DUAL_TIER_THRESHOLDS + extra:  # the article's 0.72 lies between two grid points; plus dual tier's best-F1 threshold
        d, th = _row(g, dual, t), _row(g, thr, t)
        if d is None:
            continue
        note = ""
        if th is not None and th["noise_mean"] > 0:
            l2 = d["l2_noise_mean"] / th["noise_mean"] - 1
            total = d["noise_mean"] / th["noise_mean"] - 1
            note = (f"L2 noise {_f(d['l2_noise_mean'], 2)} vs plain threshold {_f(th['noise_mean'], 2)}: {_pct(l2)} "
                    f"(claimed {_pct(-CLAIMED_NOISE_CUT)}); with L1: {_pct(total)}; plain threshold recall {_f(th['recall'])}")
        add("dual-tier L1/L2", "decay cuts injected noise by 34 %", f"{E(dual)} @ {t:.2f}", d, note)
        via = d["gold_via_l1"] + d["gold_via_l2"]
        add("dual-tier L1/L2", "L1 scratchpad (last 5 turns) always injected", f"{E(dual)} @ {t:.2f}", d,
            f"L1 share of recalled gold {_f(d['gold_via_l1'] / via if via else float('nan'), 2)}; "
            f"L1 share of injected memories {_f(d['l1_selected_mean'] / d['selected_mean'] if d['selected_mean'] else float('nan'), 2)}")
    for t in CODE_AGENT_THRESHOLDS:
        add("code-agent", "threshold table", f"{E(thr)} >= {t:.1f}", _row(g, thr, t))
    add("code-agent", "v1 keyword recall (substring, most recent first, limit 5)", E(keyword), _row(g, keyword))
    by = {(r["strategy"], None if r["threshold"] is None else round(r["threshold"], 2), r["format"]): r for r in fmt_records}
    for setting, t in [(thr, x) for x in CODE_AGENT_THRESHOLDS] + [(limit, None)]:
        cells = [by.get((setting, t, f)) for f in ("A", "B", "C")]
        if setting is None or cells[0] is None or None in cells:
            continue
        a = cells[0]["tokens_injected_mean"]
        rows.append(["code-agent", "injection format A plain / B JSON / C labelled sections", E(setting) + (f" >= {t:.1f}" if t is not None else ""),
                     _f(cells[0]["recall"]), "", "", " / ".join(_f(c["tokens_injected_mean"], 1) for c in cells), "", "",
                     f"B {_pct(cells[1]['tokens_injected_mean'] / a - 1 if a else float('nan'))}, C {_pct(cells[2]['tokens_injected_mean'] / a - 1 if a else float('nan'))} vs A"])
    if not rows:
        return ["(none of the articles' settings were run)"]
    return _table(["article", "claim", "setting", *METRIC_HEADER, "measured"], rows)


def side_by_side(g: pd.DataFrame) -> list[str]:
    """Every strategy once: its best threshold by F1 (thresholded) or its fixed setting."""
    rows = []
    for name in dict.fromkeys(g["strategy"]):
        sub = g[g["strategy"] == name]
        r = _best(g, name) if sub["threshold"].notna().any() else sub.iloc[0]
        if r is None:
            continue
        share = "" if not r["route"] else f" (share {_f(r['question_share'], 2)})"
        rows.append([f"{E(name)}{share}", _f(r["threshold"], 2), str(int(r["n_questions"])), *_metrics(r), _f(r["hit_rate"]),
                     _f(r["adversarial_abstain_rate"])])
    return ["## Strategies side by side (best threshold by F1, or the fixed setting)", "",
            *_table(["strategy", "threshold", "questions", *METRIC_HEADER, "hit rate", "adversarial abstain"], rows), ""]


def routing_section(g: pd.DataFrame, strategies: Sequence[dict]) -> list[str]:
    routers = [s["name"] for s in strategies if s.get("kind") == SEEDS["routing"][0]]
    rows = [[E(n), _f(r["question_share"], 3), str(int(r["n_questions"])), *_metrics(r)]
            for router in routers for n in (router, f"{router}/profile", f"{router}/other") if (r := _row(g, n)) is not None]
    if not rows:
        return []
    return ["## Query routing (per route; share = fraction of questions)", "", *_table(["route", "share", "questions", *METRIC_HEADER], rows), ""]


def dual_tier_section(g: pd.DataFrame, strategies: Sequence[dict]) -> list[str]:
    duals = [s["name"] for s in strategies if s.get("kind") == SEEDS["dual_tier"][0]]
    d = g[g["strategy"].isin(duals)].sort_values("threshold", kind="stable")
    if not len(d):
        return []
    thr = seed_name(strategies, "threshold")
    rows = []
    for _, r in d.iterrows():
        th = _row(g, thr, r["threshold"])
        tn = th["noise_mean"] if th is not None else float("nan")
        rows.append([_f(r["threshold"], 2), _f(r["recall"]), _f(th["recall"]) if th is not None else "n/a", _f(r["gold_via_l1"]), _f(r["gold_via_l2"]),
                     _f(r["l1_selected_mean"], 2), _f(r["l2_noise_mean"], 2), _f(r["noise_mean"], 2), _f(tn, 2),
                     _pct(r["l2_noise_mean"] / tn - 1 if tn else float("nan")), _f(r["tokens_injected_mean"], 1)])
    return ["## Dual-tier memory: L1 vs L2 contributions and noise against plain threshold recall", "",
            "gold via L1/L2 = mean share of a question's gold memories injected through that tier; noise = non-gold memories injected "
            "per question; L2 noise change = dual-tier L2 noise vs plain threshold noise at the same threshold (the article claims -34 %).", "",
            *_table(["threshold", "recall", f"{E(thr or 'threshold')} recall", "gold via L1", "gold via L2", "L1 memories", "L2 noise", "total noise",
                     "threshold noise", "L2 noise change", "tokens/question"], rows), ""]


def format_section(summary: pd.DataFrame, fmt_records: Sequence[dict], key, strategies: Sequence[dict]) -> list[str]:
    if "format" in summary and summary["format"].nunique() > 1:
        seeds = {n: ts for seed, ts in FORMAT_SEEDS.items() if (n := seed_name(strategies, seed)) is not None}
        g = summary[(summary[GROUP] == pd.Series(dict(zip(GROUP, key)))).all(axis=1)]
        recs = [r for r in g[["strategy", "threshold", "format", "tokens_injected_mean", "tokens_full_mean"]].to_dict("records")
                if r["strategy"] in seeds and (r["threshold"] != r["threshold"] or round(r["threshold"], 2) in seeds[r["strategy"]])]
    else:
        recs = list(fmt_records)
    if not recs:
        return []
    pivot: dict[tuple, dict] = {}
    for r in recs:
        t = r["threshold"]
        t = None if t is None or (isinstance(t, float) and math.isnan(t)) else t
        pivot.setdefault((r["strategy"], t), {})[r["format"]] = r["tokens_injected_mean"]
    rows = [[E(name), _f(t, 2) if t is not None else "", *[_f(v.get(f), 1) for f in ("A", "B", "C")],
             _pct(v["B"] / v["A"] - 1) if v.get("A") and "B" in v else "n/a", _pct(v["C"] / v["A"] - 1) if v.get("A") and "C" in v else "n/a"]
            for (name, t), v in pivot.items()]
    return ["## Injection formats: mean injected tokens per question", "",
            "A = `role: text` lines; B = JSON objects with role, content, date; C = `## Relevant Past Context` with "
            "`From session on <date>:` anchors and `[turn]` lines (see bench/selection/formats.py).", "",
            *_table(["strategy", "threshold", "A", "B", "C", "B vs A", "C vs A"], rows), ""]


def units_section(s: pd.DataFrame, strategies: Sequence[dict]) -> list[str]:
    if s["dataset"].nunique() < 2:
        return []
    rows = []
    thresholded = {x["name"]: bool(x.get("thresholded")) for x in strategies}
    names = [n for seed in UNIT_SEEDS if (n := seed_name(strategies, seed)) is not None]
    raw = s[(s["dataset"] == RAW_TURNS) & (s["strategy"] == seed_name(strategies, "full_context"))]["tokens_injected_mean"]
    raw_full = float(raw.iloc[0]) if len(raw) else float("nan")
    for (ds, emb, be), g in s.groupby(GROUP, sort=False):
        for name in names:
            r = _best(g, name) if thresholded.get(name) else _row(g, name)
            if r is not None:
                rows.append([E(ds), E(be), E(name), _f(r["threshold"], 2), str(int(r["n_questions"])), *_metrics(r),
                             _f(r["tokens_injected_mean"] / raw_full, 4)])
    if not rows:
        return []
    return ["## Per dataset / memory unit (raw turns, LoCoMo observations, session summaries)", "",
            "Unit corpora map gold through their pointers (bench/data/locomo_units.py): recall is over units, and `scored` = questions "
            "whose gold turns some unit points at (the others have no gold there: left out of every column, `n_excluded` in "
            "summary.csv). Token savings are against that unit "
            f"type's own full context; the last column is against the raw-turn full context (`{RAW_TURNS}`).", "",
            *_table(["dataset", "store", "strategy", "threshold", "scored", *METRIC_HEADER, "tokens / raw full context"], rows), ""]
