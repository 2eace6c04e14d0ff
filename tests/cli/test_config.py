"""bench/cli/config.py: the configs resolve outside a Hydra job (Compose API, a notebook, a multirun's sweep dir)."""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import bench.cli.config  # noqa: F401  (registers the rb.* resolvers)
from bench import run
from bench.resources import plugin_names

REPO = Path(__file__).resolve().parents[2]


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


# --- switches, "did you mean", and Hydra's refusals said with the closest name (issue 24) ---------------------------

import pytest  # noqa: E402

from bench.cli import config as C  # noqa: E402


@pytest.mark.parametrize("value, expected", [(True, True), (False, False), ("true", True), ("False", False), ("yes", True),
                                             ("NO", False), (1, True), (0, False), ("1", True), ("0", False)])
def test_a_switch_takes_true_false_yes_no_1_0(value, expected):
    assert C.as_bool("strict", value) is expected


@pytest.mark.parametrize("value, line", [
    ("flase", "config strict: expected true or false (or yes/no, 1/0), got 'flase'; did you mean false?"),
    ("ture", "config strict: expected true or false (or yes/no, 1/0), got 'ture'; did you mean true?"),
    (2, "config strict: expected true or false (or yes/no, 1/0), got 2"),
    (1.0, "config strict: expected true or false (or yes/no, 1/0), got 1.0"),
    ("", "config strict: expected true or false (or yes/no, 1/0), got ''"),
])
def test_anything_else_is_one_line(value, line):
    with pytest.raises(ValueError) as e:
        C.as_bool("strict", value)
    assert str(e.value) == line


def test_check_flags_turns_the_switches_into_booleans():
    cfg = OmegaConf.create({"strict": "yes", "progress": 0, "resume": "True", "seed": "1"})
    C.check_flags(cfg)
    assert (cfg.strict, cfg.progress, cfg.resume, cfg.seed) == (True, False, True, "1")  # only the switches


def test_did_you_mean_is_difflib_closest_or_nothing():
    assert C.did_you_mean("pth", ["name", "path"]) == "; did you mean path?"
    assert C.did_you_mean("max_recal", ["max_f1", "max_recall", "min_tokens"]) == "; did you mean max_recall?"
    assert C.did_you_mean("zzz", ["name", "path"]) == ""


def test_check_params_names_the_key_the_target_does_not_take():
    C.check_params("dataset", {"_target_": "bench.data.own.load_own", "path": "/x", "name": None})  # fine
    with pytest.raises(ValueError) as e:
        C.check_params("dataset", {"_target_": "bench.data.own.load_own", "pth": "/x"}, "own")
    assert str(e.value) == "config dataset.pth: not a setting of dataset=own; did you mean dataset.path? (its settings: path, name)"


@pytest.mark.parametrize("argv, line", [
    (["dataset=own", "dataset.pth=/x"], "dataset.pth: no such setting in dataset=own; did you mean dataset.path?"),
    (["dataset.path=/x"], "dataset.path: no such setting in dataset=auto (its settings: datasets_dir, default_dir, demo_dir); path "
                          "is a setting of dataset=locomo, locomo_2025, locomo_observations, locomo_summaries, longmemeval_oracle, "
                          "longmemeval_s, own: did you mean dataset=own dataset.path=/x?"),
    (["embedder=hashng"], "embedder=hashng: no such option; did you mean hashing? "
                          f"(options: {', '.join(plugin_names('embedder'))})"),  # every configs/embedder/*.yaml
    (["progres=false"], "progres: no such setting in the config; did you mean progress?"),
])
def test_hydras_refusal_is_said_with_the_closest_name(argv, line):
    from hydra.errors import HydraException

    with pytest.raises(HydraException) as e:
        C.compose(argv)
    assert C.explain_override_error(e.value, argv) == line


def test_an_error_that_is_not_a_refused_override_is_left_alone():
    assert C.explain_override_error(ValueError("disk full"), []) is None
