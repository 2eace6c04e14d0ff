"""The gate's report: ``summary.md`` (the verdict, both runs, the rules with their settings, the checks table) and
``checks.csv``; summary.md is appended to ``$GITHUB_STEP_SUMMARY`` when that is set.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from bench.tools.regress.gate import GateResult, _fmt, same_machine
from bench.tools.regress.runs import RunData, show
from bench.tools.regress.settings import EXACT_MAX, FAIL, REFERENCE, TOO_NOISY, GateConfig


def _load(meta: dict) -> str:
    la = meta.get("load_average")
    return "?" if not la else "/".join(f"{x:.2f}" for x in la)


def _machine(meta: dict) -> str:
    m = meta.get("machine") or {}
    return f"{m.get('cpu') or '?'} (family {m.get('family')}, model {m.get('model')}, {m.get('cores')} cores)" if m else "not recorded"


def render_markdown(result: GateResult, cfg: GateConfig, baseline: RunData | None, current: RunData | None) -> str:
    lines = ["# recallbench regression gate", "", f"**{result.verdict}**", ""]
    if baseline is not None and current is not None:
        bm = baseline.meta
        lines += [f"- Baseline: `{show(baseline.path)}` — dataset {baseline.dataset}, embedder {baseline.embedder}, "
                  f"made {bm.get('made_at', '?')} on commit {str(bm.get('git_commit') or '?')[:12]}; load average {_load(bm)}",
                  f"- Current: `{show(current.path)}` — made {current.meta.get('made_at', '?')} on commit "
                  f"{str(current.meta.get('git_commit') or '?')[:12]}; machine load average (1/5/15 min, after the latency pass) "
                  f"{_load(current.meta)}",
                  f"- Machine: baseline {_machine(bm)}; current {_machine(current.meta)}: "
                  f"{'the same' if same_machine(bm, current.meta) else 'not the same one (latency limit x' + format(cfg.latency_ratio_max_other_machine, 'g') + ')'}", ""]
    lines += ["Rules: a run the gate cannot compare (no baseline, another embedder, store set or threshold grid, rows missing, a drop "
              "the test cannot tell) FAILS unless `--allow baseline,embedder,stores,grid,missing,untestable` names it. "
              "Operating points = each store's strategies of the baseline, those without a threshold as they are and "
              f"thresholded ones at the baseline's best-F1 threshold. Quality: the paired sign-flip test over the n questions "
              f"that changed (unit {cfg.test_unit}; exact over all 2^n sign patterns when n <= {EXACT_MAX}, else "
              f"{cfg.test_resamples} random ones; smallest reachable p = 2/2^n, column min p), Holm's correction over the m checks "
              f"that can reach {cfg.alpha:g} (identical comparisons count once). A drop beyond −{cfg.tolerance:g} fails when "
              f"Holm p < {cfg.alpha:g}, or when min p > {cfg.alpha:g}/m (column limit): too few changed questions to tell. "
              f"Tokens fail when mean injected tokens / baseline > {cfg.budget_ratio_max:g}. Latency: per query, each store "
              f"then {REFERENCE} right after it, {cfg.latency_repeats} passes; store (and {REFERENCE}) latency = median over queries of the per-query "
              f"minimum; fails when (store / {REFERENCE}) / the baseline's > max({cfg.latency_ratio_max:g}, or "
              f"{cfg.latency_ratio_max_other_machine:g} when the baseline was made on another machine, "
              f"exp({cfg.latency_noise_z:g} × leave-one-pass-out standard error)) (column limit); skipped as too noisy only when "
              f"the noise part is ≥ {TOO_NOISY:g}.", ""]
    if result.checks.empty:
        return "\n".join(lines) + "\n"
    q = result.checks[(result.checks["check"] == "quality") & (result.checks["n_changed"].fillna(0) > 0)]
    if len(q):
        tests = q.drop_duplicates("rule")
        lines += ["Quality tests run (checks where something changed): " + "; ".join(
            f"{r['rule']} (smallest reachable p {r['p_min']:.3g}, Holm level {r['limit']:.3g})" for _, r in tests.iterrows()) + ".", ""]
    order = {"coverage": 0, "quality": 1, "tokens": 2, "latency": 3}
    checks = result.checks.assign(_o=result.checks["check"].map(order), _f=~result.checks["verdict"].astype(str).str.startswith(FAIL))
    checks = checks.sort_values(["_f", "_o"], kind="stable")
    lines += ["| check | config | metric | baseline | current | delta | ratio | limit | changed | min p | Holm p | verdict |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in checks.iterrows():
        digits = 1 if r["check"] == "tokens" else (2 if r["check"] == "latency" else 3)
        b, c = r["baseline"], r["current"]
        b = _fmt(b, digits) if isinstance(b, float) else str(b)
        c = _fmt(c, digits) if isinstance(c, float) else str(c)
        d = "—" if isinstance(r["delta"], float) and math.isnan(r["delta"]) else f"{r['delta']:+.{digits}f}"
        p = "—" if math.isnan(r["p_holm"]) else f"{r['p_holm']:.3g}"
        pm = "—" if math.isnan(r["p_min"]) else f"{r['p_min']:.3g}"
        nc = "—" if math.isnan(r["n_changed"]) else str(int(r["n_changed"]))
        lim = "—" if math.isnan(r["limit"]) else f"{r['limit']:.3g}"
        v = f"**{r['verdict']}**" if str(r["verdict"]).startswith(FAIL) else r["verdict"]
        lines.append(f"| {r['check']} | {r['config']} | {r['metric']} | {b} | {c} | {d} | {_fmt(r['ratio'], 2)} | {lim} | {nc} | {pm} | {p} | {v} |")
    return "\n".join(lines) + "\n"


def report(result: GateResult, cfg: GateConfig, baseline: RunData | None, current: RunData | None, out: Path) -> None:
    """summary.md and checks.csv in ``out``; summary.md appended to $GITHUB_STEP_SUMMARY when set."""
    from bench.output import write_atomic

    md = render_markdown(result, cfg, baseline, current)
    write_atomic(out / "summary.md", lambda p: p.write_text(md))
    write_atomic(out / "checks.csv", lambda p: result.checks.to_csv(p, index=False))
    step = os.environ.get("GITHUB_STEP_SUMMARY")
    if step:
        with open(step, "a") as f:
            f.write(md + "\n")
