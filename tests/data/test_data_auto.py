"""bench.data.auto (dataset=auto, the default): LoCoMo from the data path; the demo only when no data path is configured."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from bench.data.auto import load_default
from bench.resources import demo_dir

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "data" / "locomo_tiny.json"


def test_nothing_configured_and_no_locomo_is_the_demo_with_a_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="bench.data.auto")
    corpus = load_default(datasets_dir=tmp_path / "datasets", default_dir=tmp_path / "datasets", demo_dir=demo_dir())
    assert corpus.name == "demo" and len(corpus.questions) == 25  # the demo: 22 scored + 3 adversarial
    assert caplog.messages == [f"no data path configured and LoCoMo not at {tmp_path / 'datasets' / 'locomo' / 'locomo10.json'}: "
                               "using the demo corpus (BENCH_DATA_DIR=<dir holding locomo/locomo10.json> for LoCoMo, see "
                               "datasets/README.md)"]


@pytest.mark.parametrize("exists", [False, True])
def test_a_configured_path_without_locomo_is_an_error_naming_it(tmp_path, exists):
    data = tmp_path / "corpra"
    if exists:
        data.mkdir()
    what = "holds no LoCoMo (locomo/locomo10.json not found)" if exists else "does not exist"
    with pytest.raises(FileNotFoundError) as e:
        load_default(datasets_dir=data, default_dir=tmp_path / "datasets", demo_dir=demo_dir())
    assert str(e.value) == (f"dataset=auto: the data path {data} (env BENCH_DATA_DIR / paths.datasets) {what}; fix the path, fetch "
                            "LoCoMo (recallbench data fetch --only locomo), name another dataset (dataset=own dataset.path=...), or "
                            "unset BENCH_DATA_DIR for the demo corpus")


def test_locomo_in_the_data_path_is_loaded_configured_or_not(tmp_path):
    (tmp_path / "d" / "locomo").mkdir(parents=True)
    shutil.copy(TINY, tmp_path / "d" / "locomo" / "locomo10.json")
    for default in (tmp_path / "d", tmp_path / "other"):
        assert load_default(datasets_dir=tmp_path / "d", default_dir=default, demo_dir=demo_dir()).name == "locomo"
