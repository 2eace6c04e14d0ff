"""The gate's settings: its constants, the ``regress:`` block of the experiment config (``GateConfig``; its defaults live in
configs/experiment/regress.yaml only) and the block a finished run was made with (``gate_config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from bench.cli.common import work_dir
from bench.results.rundir import LATENCY, META, QUESTIONS, SUMMARY, RunDir


REPO = work_dir()  # where the command runs (the sweep's paths.root): reports/ and caches go there, never into the package
REFERENCE = "exact"  # the store every latency is divided by
RUN_FLAGS = ("trace_cache=false", "resume=false", "publish_latest=false", "progress=false")
QUALITY_METRICS = ("recall", "f1", "precision", "hit")
BASELINE_FILES = (SUMMARY, QUESTIONS, META, LATENCY)
CHECK_COLUMNS = ["check", "config", "metric", "baseline", "current", "delta", "ratio", "limit", "n_changed", "p_min", "p_holm",
                 "rule", "verdict"]
ALLOW = ("baseline", "embedder", "stores", "grid", "missing", "untestable")  # what --allow accepts
EXACT_MAX = 16  # up to this many changed questions the sign-flip test enumerates all 2**n patterns
TOO_NOISY = 2.0  # a latency noise limit at or above this skips the check (a 2x regression must not hide)
FAIL, OK, SKIPPED = "FAIL", "ok", "skipped"
SHIPPED = "experiment/regress.yaml"  # the experiment, and the only copy of the gate's defaults (its regress: block)
NAN = float("nan")


class RegressError(RuntimeError):
    """The gate could not run (bad input, the experiment failed): the message is the verdict."""


@dataclass(frozen=True)
class GateConfig:
    """The ``regress:`` block. Its defaults live in configs/experiment/regress.yaml only (each setting is
    documented there): ``GateConfig.defaults(**changes)`` / ``from_mapping(block)`` start from there."""

    metrics: tuple[str, ...]
    tolerance: float
    alpha: float
    test_resamples: int
    test_unit: str
    budget_ratio_max: float
    latency_repeats: int
    latency_queries: int
    latency_warmup: int
    latency_ratio_max: float
    latency_ratio_max_other_machine: float
    latency_noise_z: float
    seed: int

    def __post_init__(self) -> None:
        w = "regress config"
        for name in ("tolerance", "alpha", "budget_ratio_max", "latency_ratio_max", "latency_ratio_max_other_machine", "latency_noise_z"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ValueError(f"{w}: {name} must be a number (got {v!r})")
        bad = [m for m in self.metrics if m not in QUALITY_METRICS]
        if not self.metrics or bad:
            raise ValueError(f"{w}: metrics must be a non-empty subset of {list(QUALITY_METRICS)} (got {list(self.metrics)})")
        if not self.tolerance >= 0:
            raise ValueError(f"{w}: tolerance must be >= 0 (got {self.tolerance!r})")
        if not 0 < self.alpha < 1:
            raise ValueError(f"{w}: alpha must be in (0, 1) (got {self.alpha!r})")
        if not self.latency_noise_z > 0:
            raise ValueError(f"{w}: latency_noise_z must be > 0 (got {self.latency_noise_z!r})")
        if self.test_unit not in ("question", "conversation"):
            raise ValueError(f"{w}: test_unit must be 'question' or 'conversation' (got {self.test_unit!r})")
        for name in ("budget_ratio_max", "latency_ratio_max", "latency_ratio_max_other_machine"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"{w}: {name} must be a ratio >= 1 (got {getattr(self, name)!r})")
        for name, low in (("test_resamples", 100), ("latency_repeats", 1), ("latency_queries", 1), ("latency_warmup", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise ValueError(f"{w}: {name} must be an integer >= {low} (got {v!r})")

    @classmethod
    def defaults(cls, **changes) -> "GateConfig":
        """The shipped defaults (the ``regress:`` block of configs/experiment/regress.yaml), with ``changes``."""
        return cls.from_mapping(changes, where="GateConfig.defaults")

    @classmethod
    def from_mapping(cls, block: Mapping | None, *, where: str = "regress config") -> "GateConfig":
        """A ``regress:`` block (settings it leaves out: the shipped defaults)."""
        from bench.resources import shipped_config

        block = dict(block or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(block) - known)
        if unknown:
            raise ValueError(f"{where}: unknown regress setting(s) {unknown} (known: {sorted(known)})")
        block = {**shipped_config(SHIPPED)["regress"], **block}
        block["metrics"] = tuple(block["metrics"])
        try:
            return cls(**block)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


def gate_config(run_dir: Path) -> GateConfig:
    """The ``regress:`` block of the run's first finished job (defaults when it has none)."""
    jobs = RunDir(run_dir).all_job_dirs()
    path = next((j.settings_file() for j in jobs if j.finished() and j.settings_file()), None)
    if path is None:
        return GateConfig.defaults()
    return GateConfig.from_mapping(RunDir(path.parent).settings().get("regress"), where=f"{path}: regress")
