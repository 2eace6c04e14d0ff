"""The default dataset of ``make sweep``: LoCoMo when the data path has it, else our demo corpus."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from bench.types import Corpus

log = logging.getLogger(__name__)


def load_default(*, datasets_dir: str | os.PathLike, demo_dir: str | os.PathLike) -> Corpus:
    from bench.data.locomo import load_locomo
    from bench.data.own import load_own

    locomo = Path(datasets_dir) / "locomo" / "locomo10.json"
    if locomo.is_file():
        log.info("dataset: LoCoMo (original release) from %s", locomo)
        return load_locomo(path=locomo, name="locomo")
    log.warning("LoCoMo not found at %s (set BENCH_DATA_DIR, see datasets/README.md); using the demo corpus", locomo)
    return load_own(path=demo_dir, name="demo")
