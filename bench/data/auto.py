"""The default dataset of ``make sweep``: LoCoMo from the data path; the demo corpus only when no data path is configured.

A data path that was configured (env ``BENCH_DATA_DIR`` or ``paths.datasets``) but does not hold LoCoMo
(a typo, a missing download) is an error naming it, never a silent benchmark of the demo corpus.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from bench.types import Corpus

log = logging.getLogger(__name__)

LOCOMO = Path("locomo") / "locomo10.json"


def load_default(*, datasets_dir: str | os.PathLike, demo_dir: str | os.PathLike,
                 default_dir: str | os.PathLike | None = None) -> Corpus:
    """LoCoMo from ``datasets_dir``; the demo corpus when it is not there and ``datasets_dir`` is ``default_dir``
    (nothing configured). ``default_dir`` None: no fallback at all."""
    from bench.data.locomo import load_locomo
    from bench.data.own import load_own

    data = Path(datasets_dir).expanduser()
    locomo = data / LOCOMO
    if locomo.is_file():
        log.info("dataset: LoCoMo (original release) from %s", locomo)
        return load_locomo(path=locomo, name="locomo")
    configured = default_dir is None or data.resolve() != Path(default_dir).expanduser().resolve()
    if configured:
        what = "does not exist" if not data.exists() else f"holds no LoCoMo ({LOCOMO} not found)"
        raise FileNotFoundError(
            f"dataset=auto: the data path {data} (env BENCH_DATA_DIR / paths.datasets) {what}; fix the path, "
            f"fetch LoCoMo (recallbench data fetch --only locomo), name another dataset (dataset=own dataset.path=...), "
            f"or unset BENCH_DATA_DIR for the demo corpus")
    log.warning("no data path configured and LoCoMo not at %s: using the demo corpus (BENCH_DATA_DIR=<dir holding "
                "locomo/locomo10.json> for LoCoMo, see datasets/README.md)", locomo)
    return load_own(path=demo_dir, name="demo")
