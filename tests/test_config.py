"""bench/cli/config.py: the configs resolve outside a Hydra job (Compose API, a notebook, a multirun's sweep dir)."""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import bench.cli.config  # noqa: F401  (registers the rb.* resolvers)
from bench import run

REPO = Path(__file__).resolve().parent.parent


def test_paths_and_run_dirs_resolve_with_the_compose_api(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BENCH_DATA_DIR", raising=False)
    run.new_run_id()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True)
    paths = OmegaConf.to_container(cfg.paths, resolve=True)
    assert paths["root"] == str(tmp_path) and paths["reports"] == str(tmp_path / "reports")
    assert paths["datasets"] == str(tmp_path / "datasets")
    assert cfg.dataset.demo_dir == str(REPO / "datasets" / "demo")  # the demo corpus of this checkout, wherever we run
    sweep = cfg.hydra.sweep.dir  # ${hydra:runtime.cwd} made this fail ("HydraConfig was not set")
    assert sweep.startswith(str(tmp_path / "reports" / "runs")) and sweep.endswith("_" + os.environ[run.RUN_ID_ENV])
    assert cfg.hydra.run.dir.endswith("_" + run.run_id())
    assert cfg.hydra.output_subdir is None  # no raw .hydra/ copy of the overrides
