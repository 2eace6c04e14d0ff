"""Every configs/experiment/*.yaml (found by glob: a new experiment is picked up) runs as one job on the demo corpus,
offline and small: the hashing embedder and the exact store replace the experiment's own (they decide no strategy,
format or gate setting), the job runs in-process through ``bench.api.run`` into a temporary folder, report deferred.

Checks: the job finishes with no failure record; its summary holds exactly the strategies and injection formats the
composed experiment names (the strategies experiment: every configs/strategy/*.yaml), each scored on the demo's
questions; and the experiment's settings that are not plugins (formats, the regress gate) reach the job's config.
"""

from __future__ import annotations

import pytest
import yaml

from bench import api
from bench.cli.config import build_strategies, compose
from bench.resources import configs_dir, demo_dir, plugin_names

EXPERIMENTS = plugin_names("experiment")  # configs/experiment/*.yaml
SMALL = ["embedder=hashing", "backend=exact", "dataset=own", f"dataset.path={demo_dir()}"]


def overrides(name: str, tmp_path) -> list[str]:
    return [f"experiment={name}", *SMALL, f"paths.reports={tmp_path / 'reports'}", f"paths.cache={tmp_path / 'cache'}",
            "publish_latest=false", "progress=false", "defer_report=true", "resume=false"]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_runs_on_the_demo_corpus(name, tmp_path):
    cfg = compose(overrides(name, tmp_path))
    specs = build_strategies(cfg.strategy)
    want = [s.name for roles in dict.fromkeys(s.roles for s in specs) for s in specs if s.roles == roles]  # one trace per role filter
    formats = list(cfg.get("formats") or ["A"])
    run = api.run(overrides(name, tmp_path))
    assert run.failed == (), f"experiment={name}: {run.failed}"
    s = run.summary
    names = list(dict.fromkeys(s["strategy"]))
    assert [n for n in names if n in want] == want, f"experiment={name}: strategies {names}"
    assert all(n.split("/")[0] in want for n in names), f"experiment={name}: {names}"  # a router's routes: routing/<route>
    assert sorted(set(s["format"])) == sorted(formats), f"experiment={name}: formats {sorted(set(s['format']))}"
    assert set(s["dataset"]) == {"demo"} and set(s["backend"]) == {"exact"}
    assert (s.groupby("strategy")["recall"].count() > 0).all(), f"experiment={name}: a strategy was never scored"


def test_an_experiment_keeps_its_own_settings():
    """Hand-checked: what each shipped experiment sets beside its plugins survives the small overrides."""
    def raw(name):
        return yaml.safe_load((configs_dir() / "experiment" / f"{name}.yaml").read_text())

    cfg = compose(["experiment=strategies", *SMALL])
    assert list(cfg.formats) == raw("strategies")["formats"] == ["A", "B", "C"]
    cfg = compose(["experiment=regress", *SMALL])
    assert cfg.regress.tolerance == raw("regress")["regress"]["tolerance"] == 0.02
    cfg = compose(["experiment=transfer", *SMALL])
    assert list(cfg.strategy) == raw("transfer")["defaults"][0]["override /strategy"]
