"""Report sections for the recall strategies: side-by-side table, routing, dual tier, formats, units,
and the "seed claims, re-measured" table for the strategy articles.

Owns ``strategy_sections(summary, jobs) -> list[str]`` (markdown lines, called by
``bench.report.write_report``). Reads tables only: ``summary`` is summary.csv, ``jobs`` the job
metadata (meta.json / jobs.json; its ``format_tokens`` records come from
``bench.sweep.format_tokens_table``). Strategies are found by their config names (``limit5``,
``threshold``, ``hybrid5``, ``routing``, ``dual_tier``, ``keyword5``, ...); a section whose
strategies were not run is left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from bench.sweep import FORMAT_SEED

GROUP = ["dataset", "embedder", "backend"]
SEEKDB_THRESHOLD = 0.65  # the seekdb agent-memory article's threshold
DUAL_TIER_THRESHOLDS = (0.70, 0.75)  # grid points around the L1/L2 article's 0.72
CODE_AGENT_THRESHOLDS = (0.1, 0.3, 0.5, 0.7)  # the code-agent article's threshold table
CLAIMED_NOISE_CUT = 0.34  # "34 % less noise" (L1/L2 article)
RAW_TURNS = "locomo"  # the raw-turn dataset the unit corpora are compared with


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


def _row(g: pd.DataFrame, strategy: str, threshold: float | None = None):
    s = g[g["strategy"] == strategy]
    if threshold is None:
        s = s[s["threshold"].isna()]
    else:
        s = s[(s["threshold"] - threshold).abs() < 1e-9]
    return s.iloc[0] if len(s) else None


def _best(g: pd.DataFrame, strategy: str):
    s = g[(g["strategy"] == strategy) & g["f1"].notna()]
    return s.loc[s["f1"].idxmax()] if len(s) else None


def strategy_sections(summary: pd.DataFrame, jobs: Sequence[dict]) -> list[str]:
    """Markdown lines: seed claims for the strategy articles, then the per-strategy sections."""
    s = _fmt_a(summary)
    lines: list[str] = []
    for key, g in s.groupby(GROUP, sort=False):
        title = " / ".join(map(str, key))
        fmt_records = [r for j in jobs for r in (j.get("format_tokens") or []) if all(r.get(k) == v for k, v in zip(GROUP, key))]
        lines += [f"## Seed claims, re-measured: strategy articles ({title})", ""] + seed_table(g, fmt_records) + [""]
        lines += side_by_side(g) + routing_section(g) + dual_tier_section(g) + format_section(summary, fmt_records, key)
    lines += units_section(s)
    return lines


METRIC_HEADER = ["recall", "precision", "F1", "tokens/question", "token savings", "noise/question"]


def _metrics(r) -> list[str]:
    return [_f(r["recall"]), _f(r["precision"]), _f(r["f1"]), _f(r["tokens_injected_mean"], 1), _f(r["token_savings"]), _f(r.get("noise_mean"), 2)]


def seed_table(g: pd.DataFrame, fmt_records: Sequence[dict]) -> list[str]:
    rows = []

    def add(seed: str, claim: str, setting: str, r, note: str = "") -> None:
        if r is not None:
            rows.append([seed, claim, setting, *_metrics(r), note])

    add("seekdb agent-memory", "limit-5 recall saves tokens", "limit5", _row(g, "limit5"))
    add("seekdb agent-memory", "a similarity threshold saves tokens", f"threshold >= {SEEKDB_THRESHOLD:.2f}", _row(g, "threshold", SEEKDB_THRESHOLD))
    add("seekdb agent-memory", "threshold capped at 5", f"hybrid5 >= {SEEKDB_THRESHOLD:.2f}", _row(g, "hybrid5", SEEKDB_THRESHOLD))
    r = _row(g, "routing")
    if r is not None:
        parts = [f"{route}: share {_f(p['question_share'], 2)}, recall {_f(p['recall'])}"
                 for route in ("profile", "other") if (p := _row(g, f"routing/{route}")) is not None]
        add("seekdb agent-memory", "route profile questions to limit-3, others to >= 0.65 cap 5 (user-only)", "routing", r, "; ".join(parts))
    best = _best(g, "dual_tier")
    extra = () if best is None or any(abs(best["threshold"] - t) < 1e-9 for t in DUAL_TIER_THRESHOLDS) else (float(best["threshold"]),)
    for t in DUAL_TIER_THRESHOLDS + extra:  # the article's 0.72 lies between two grid points; plus dual tier's best-F1 threshold
        d, th = _row(g, "dual_tier", t), _row(g, "threshold", t)
        if d is None:
            continue
        note = ""
        if th is not None and th["noise_mean"] > 0:
            l2 = d["l2_noise_mean"] / th["noise_mean"] - 1
            total = d["noise_mean"] / th["noise_mean"] - 1
            note = (f"L2 noise {_f(d['l2_noise_mean'], 2)} vs plain threshold {_f(th['noise_mean'], 2)}: {_pct(l2)} "
                    f"(claimed {_pct(-CLAIMED_NOISE_CUT)}); with L1: {_pct(total)}; plain threshold recall {_f(th['recall'])}")
        add("dual-tier L1/L2", "decay cuts injected noise by 34 %", f"dual_tier @ {t:.2f}", d, note)
        via = d["gold_via_l1"] + d["gold_via_l2"]
        add("dual-tier L1/L2", "L1 scratchpad (last 5 turns) always injected", f"dual_tier @ {t:.2f}", d,
            f"L1 share of recalled gold {_f(d['gold_via_l1'] / via if via else float('nan'), 2)}; "
            f"L1 share of injected memories {_f(d['l1_selected_mean'] / d['selected_mean'] if d['selected_mean'] else float('nan'), 2)}")
    for t in CODE_AGENT_THRESHOLDS:
        add("code-agent", "threshold table", f"threshold >= {t:.1f}", _row(g, "threshold", t))
    add("code-agent", "v1 keyword recall (substring, most recent first, limit 5)", "keyword5", _row(g, "keyword5"))
    by = {(r["strategy"], None if r["threshold"] is None else round(r["threshold"], 2), r["format"]): r for r in fmt_records}
    for name, t in [("threshold", x) for x in CODE_AGENT_THRESHOLDS] + [("limit5", None)]:
        cells = [by.get((name, t, f)) for f in ("A", "B", "C")]
        if cells[0] is None or None in cells:
            continue
        a = cells[0]["tokens_injected_mean"]
        rows.append(["code-agent", "injection format A plain / B JSON / C labelled sections", f"{name}" + (f" >= {t:.1f}" if t is not None else ""),
                     _f(cells[0]["recall"]), "", "", " / ".join(_f(c["tokens_injected_mean"], 1) for c in cells), "", "",
                     f"B {_pct(cells[1]['tokens_injected_mean'] / a - 1 if a else float('nan'))}, C {_pct(cells[2]['tokens_injected_mean'] / a - 1 if a else float('nan'))} vs A"])
    if not rows:
        return ["(none of the seed strategies were run)"]
    return _table(["seed", "claim", "setting", *METRIC_HEADER, "measured"], rows)


def side_by_side(g: pd.DataFrame) -> list[str]:
    """Every strategy once: its best threshold by F1 (thresholded) or its fixed setting."""
    rows = []
    for name in dict.fromkeys(g["strategy"]):
        sub = g[g["strategy"] == name]
        r = _best(g, name) if sub["threshold"].notna().any() else sub.iloc[0]
        if r is None:
            continue
        share = "" if not r["route"] else f" (share {_f(r['question_share'], 2)})"
        rows.append([f"{name}{share}", _f(r["threshold"], 2), str(int(r["n_questions"])), *_metrics(r), _f(r["hit_rate"]),
                     _f(r["adversarial_abstain_rate"])])
    return ["## Strategies side by side (best threshold by F1, or the fixed setting)", "",
            *_table(["strategy", "threshold", "questions", *METRIC_HEADER, "hit rate", "adversarial abstain"], rows), ""]


def routing_section(g: pd.DataFrame) -> list[str]:
    rows = [[n, _f(r["question_share"], 3), str(int(r["n_questions"])), *_metrics(r)]
            for n in ("routing", "routing/profile", "routing/other") if (r := _row(g, n)) is not None]
    if not rows:
        return []
    return ["## Query routing (per route; share = fraction of questions)", "", *_table(["route", "share", "questions", *METRIC_HEADER], rows), ""]


def dual_tier_section(g: pd.DataFrame) -> list[str]:
    d = g[g["strategy"] == "dual_tier"].sort_values("threshold")
    if not len(d):
        return []
    rows = []
    for _, r in d.iterrows():
        th = _row(g, "threshold", r["threshold"])
        tn = th["noise_mean"] if th is not None else float("nan")
        rows.append([_f(r["threshold"], 2), _f(r["recall"]), _f(th["recall"]) if th is not None else "n/a", _f(r["gold_via_l1"]), _f(r["gold_via_l2"]),
                     _f(r["l1_selected_mean"], 2), _f(r["l2_noise_mean"], 2), _f(r["noise_mean"], 2), _f(tn, 2),
                     _pct(r["l2_noise_mean"] / tn - 1 if tn else float("nan")), _f(r["tokens_injected_mean"], 1)])
    return ["## Dual-tier memory: L1 vs L2 contributions and noise against plain threshold recall", "",
            "gold via L1/L2 = mean share of a question's gold memories injected through that tier; noise = non-gold memories injected "
            "per question; L2 noise change = dual-tier L2 noise vs plain threshold noise at the same threshold (the article claims -34 %).", "",
            *_table(["threshold", "recall", "threshold recall", "gold via L1", "gold via L2", "L1 memories", "L2 noise", "total noise",
                     "threshold noise", "L2 noise change", "tokens/question"], rows), ""]


def format_section(summary: pd.DataFrame, fmt_records: Sequence[dict], key) -> list[str]:
    if "format" in summary and summary["format"].nunique() > 1:
        g = summary[(summary[GROUP] == pd.Series(dict(zip(GROUP, key)))).all(axis=1)]
        recs = [r for r in g.to_dict("records")  # the seed is keyed by what a strategy is (column kind), not its name
                if r.get("kind") in FORMAT_SEED and (r["threshold"] != r["threshold"] or round(r["threshold"], 2) in FORMAT_SEED[r["kind"]])]
    else:
        recs = list(fmt_records)
    if not recs:
        return []
    pivot: dict[tuple, dict] = {}
    for r in recs:
        t = r["threshold"]
        t = None if t is None or (isinstance(t, float) and math.isnan(t)) else t
        pivot.setdefault((r["strategy"], t), {})[r["format"]] = r["tokens_injected_mean"]
    rows = [[name, _f(t, 2) if t is not None else "", *[_f(v.get(f), 1) for f in ("A", "B", "C")],
             _pct(v["B"] / v["A"] - 1) if v.get("A") and "B" in v else "n/a", _pct(v["C"] / v["A"] - 1) if v.get("A") and "C" in v else "n/a"]
            for (name, t), v in pivot.items()]
    return ["## Injection formats: mean injected tokens per question", "",
            "A = `role: text` lines; B = JSON objects with role, content, date; C = `## Relevant Past Context` with "
            "`From session on <date>:` anchors and `[turn]` lines (see bench/formats.py).", "",
            *_table(["strategy", "threshold", "A", "B", "C", "B vs A", "C vs A"], rows), ""]


def units_section(s: pd.DataFrame) -> list[str]:
    if s["dataset"].nunique() < 2:
        return []
    rows = []
    raw = s[(s["dataset"] == RAW_TURNS) & (s["strategy"] == "full_context")]["tokens_injected_mean"]
    raw_full = float(raw.iloc[0]) if len(raw) else float("nan")
    for (ds, emb, be), g in s.groupby(GROUP, sort=False):
        for name in ("limit5", "hybrid5", "threshold", "full_context", "bm25_5"):
            r = _best(g, name) if name in ("hybrid5", "threshold") else _row(g, name)
            if r is not None:
                rows.append([ds, be, name, _f(r["threshold"], 2), str(int(r["n_questions"])), *_metrics(r),
                             _f(r["tokens_injected_mean"] / raw_full, 4)])
    if not rows:
        return []
    return ["## Per dataset / memory unit (raw turns, LoCoMo observations, session summaries)", "",
            "Unit corpora map gold through their pointers (bench/data/locomo_units.py): recall is over units, and `scored` = questions "
            "whose gold turns some unit points at (the others have no gold there: left out of every column, `n_excluded` in "
            "summary.csv). Token savings are against that unit "
            f"type's own full context; the last column is against the raw-turn full context (`{RAW_TURNS}`).", "",
            *_table(["dataset", "store", "strategy", "threshold", "scored", *METRIC_HEADER, "tokens / raw full context"], rows), ""]


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.report.strategies RUN_DIR``: write RUN_DIR/strategies.md from a finished run."""
    import argparse
    import json
    from pathlib import Path

    from bench.output import write_atomic

    ap = argparse.ArgumentParser(prog="python -m bench.report.strategies", description=main.__doc__)
    ap.add_argument("run_dir", nargs="?", default="reports/latest")
    run_dir = Path(ap.parse_args(argv).run_dir)
    if not (run_dir / "summary.csv").exists():
        ap.error(f"{run_dir}/summary.csv not found")
    summary = pd.read_csv(run_dir / "summary.csv")
    meta = run_dir / ("jobs.json" if (run_dir / "jobs.json").exists() else "meta.json")
    jobs = json.loads(meta.read_text()) if meta.exists() else []
    jobs = jobs if isinstance(jobs, list) else [jobs]
    text = "\n".join(["# recallbench: strategies", "", *strategy_sections(summary, jobs)])
    print(write_atomic(run_dir / "strategies.md", lambda p: p.write_text(text)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
