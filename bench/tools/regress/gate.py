"""The gate: every check family on a run and its baseline (``gate`` -> ``GateResult``: the checks and the one-line verdict).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from bench.tools.regress.checks.common import operating_points
from bench.tools.regress.checks.coverage import coverage_checks
from bench.tools.regress.checks.latency import latency_checks
from bench.tools.regress.checks.quality import quality_checks
from bench.tools.regress.checks.tokens import token_checks
from bench.tools.regress.runs import RunData, show
from bench.tools.regress.settings import CHECK_COLUMNS, FAIL, REFERENCE, SKIPPED, GateConfig


@dataclass(frozen=True)
class GateResult:
    checks: pd.DataFrame  # CHECK_COLUMNS
    verdict: str  # the one line
    failed: bool
    skipped: bool = False


def _fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _inside(verdict: str) -> str:
    """"FAIL (why)" -> "why"."""
    v = str(verdict)[len(FAIL):].strip()
    return v[1:-1] if v.startswith("(") and v.endswith(")") else v


def _why(r: pd.Series) -> str:
    if r["check"] == "quality":
        if str(r["verdict"]) != FAIL:
            return f"{r['metric']} {r['config']}: {_fmt(r['baseline'])} -> {_fmt(r['current'])} ({r['delta']:+.3f}; {_inside(r['verdict'])})"
        return f"{r['metric']} {r['config']}: {_fmt(r['baseline'])} -> {_fmt(r['current'])} ({r['delta']:+.3f}, Holm p {r['p_holm']:.2g})"
    if r["check"] == "tokens":
        return f"tokens {r['config']}: {_fmt(r['baseline'], 1)} -> {_fmt(r['current'], 1)} (x{_fmt(r['ratio'], 2)})"
    if r["check"] == "latency":
        if math.isnan(r["ratio"]):
            return f"latency {r['config']}: {_inside(r['verdict'])}"
        return (f"latency {r['config']}: {_fmt(r['baseline'], 2)}x -> {_fmt(r['current'], 2)}x {REFERENCE} "
                f"(x{_fmt(r['ratio'], 2)} > limit x{_fmt(r['limit'], 2)})")
    return f"{r['metric']} {r['config']}: {r['baseline']} -> {r['current']} {r['verdict'][len(FAIL):].strip()}".strip()


def _asked(run: RunData) -> set[str] | None:
    """The stores the run measured (its jobs' backends, from meta.json), or None when it does not say."""
    jobs = run.meta.get("jobs") or []
    return {str(j["backend"]) for j in jobs if isinstance(j, dict) and j.get("backend")} or None


def same_machine(baseline_meta: dict, current_meta: dict) -> bool:
    """Both runs say which machine made them (meta.json's ``machine``) and it is the same one."""
    b, c = baseline_meta.get("machine"), current_meta.get("machine")
    return bool(b) and b == c


def gate(baseline: RunData, current: RunData, cfg: GateConfig, *, failed_jobs: Sequence[dict] = (),
         allow: frozenset = frozenset()) -> GateResult:
    """Compare a current run with its baseline. Another dataset fails; another embedder fails unless ``allow`` has
    ``embedder`` (then the comparison is skipped, exit 0); the rest: see the module docstring."""
    for what in ("dataset", "embedder"):
        b, c = getattr(baseline, what), getattr(current, what)
        if b != c:
            why = f"baseline {show(baseline.path)} was made with {what} {b!r}, this run uses {c!r}"
            if what == "embedder" and "embedder" in allow:
                return GateResult(pd.DataFrame(columns=CHECK_COLUMNS), f"regress SKIPPED: {why} (allowed by --allow embedder)", False, True)
            more = "; --allow embedder skips the comparison" if what == "embedder" else ""
            return GateResult(pd.DataFrame(columns=CHECK_COLUMNS), f"regress FAIL: cannot compare: {why}{more}", True)
    points = operating_points(baseline.summary, baseline.rows)
    parts = [coverage_checks(baseline.rows, current.rows, points, failed_jobs,
                             (baseline.meta.get("labels_sha256"), current.meta.get("labels_sha256")), allow=allow, asked=_asked(current)),
             quality_checks(baseline.rows, current.rows, points, cfg, allow=allow),
             token_checks(baseline.rows, current.rows, points, cfg),
             latency_checks(baseline.latency, current.latency, cfg, same_machine=same_machine(baseline.meta, current.meta))]
    checks = pd.concat([p for p in parts if not p.empty], ignore_index=True) if any(not p.empty for p in parts) \
        else pd.DataFrame(columns=CHECK_COLUMNS)
    bad = checks[checks["verdict"].astype(str).str.startswith(FAIL)]
    if len(bad):
        whys = [_why(r) for _, r in bad.iterrows()]
        more = f" (+{len(whys) - 3} more in summary.md)" if len(whys) > 3 else ""
        verdict = f"regress FAIL: {len(whys)} regression(s) vs {show(baseline.path)}: " + "; ".join(whys[:3]) + more
        return GateResult(checks, verdict, True)
    n = checks["check"].value_counts()
    v = checks["verdict"].astype(str)
    skipped = int(((checks["check"] == "coverage") & (checks["metric"] == "rows") & v.str.startswith(SKIPPED)).sum())
    allowed = int(v.str.contains("allowed by --allow").sum())
    noisy = int(((checks["check"] == "latency") & v.str.startswith(SKIPPED)).sum())
    notes = ([f"{skipped} baseline points not in this run"] if skipped else []) + ([f"{allowed} allowed by --allow"] if allowed else []) \
        + ([f"{noisy} latency checks too noisy"] if noisy else [])
    verdict = (f"regress PASS: {n.get('quality', 0)} quality, {n.get('tokens', 0)} token and {n.get('latency', 0)} latency checks "
               f"within limits vs {show(baseline.path)} ({baseline.dataset}, {len(points) - skipped} operating points"
               + (f"; {'; '.join(notes)}" if notes else "") + ")")
    return GateResult(checks, verdict, False)
