"""Every shell block of README.md and datasets/README.md, run verbatim as a user's shell would.

A temporary copy of the repo (the venv linked in, the repo's embedding cache seeded, ``.venv/bin`` first on PATH, no BENCH_DATA_DIR,
HOME a temp dir holding ``~/corpora`` = the real corpora and ``~/my-data`` = an own-format corpus)
runs each ```bash block with ``bash -e``; a block fails on a non-zero exit or a traceback. A block
whose first line says ``# needs: network`` cannot succeed here (no network at test time): it must
still end without a traceback. ``make test`` is typed as written too; inside it pytest only
collects the suite (the full run is this suite itself). Every fence of both files must say what it
holds (```bash, ```text, ```json ...), so no command hides in an unlabelled block.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import data_dir

REPO = Path(__file__).resolve().parent.parent
READMES = ("README.md", "datasets/README.md")
SHELL = {"bash", "sh", "shell"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
COPY_IGNORE = shutil.ignore_patterns(".venv", ".git", "reports", "__pycache__", "*.egg-info", ".pytest_cache")


def blocks(path: Path) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block of a markdown file."""
    return [(m["info"].strip(), m["body"]) for m in FENCE.finditer(path.read_text())]


SHELL_BLOCKS = [(name, i, body) for name in READMES for i, (info, body) in enumerate(blocks(REPO / name)) if info in SHELL]


def test_every_fence_says_what_it_holds():
    for name in READMES:
        text = (REPO / name).read_text()
        assert text.count("```") % 2 == 0, name
        found = blocks(REPO / name)
        assert len(found) * 2 == text.count("```"), f"{name}: a fence the parser does not see"
        for info, body in found:
            assert info, f"{name}: a fence without a language (```bash, ```text, ...): {body[:80]!r}"


def test_the_readmes_show_the_commands_we_promise():
    commands = "\n".join(body for _, _, body in SHELL_BLOCKS)
    for must in ("make sweep", "make test", "-m strategy='glob(*)'", "dataset=own dataset.path=$HOME/my-data", "recallbench data check",
                 "recallbench sweep", "recallbench report", "python -m bench ", "pip install .", "make stores",
                 "make sweep EMBEDDERS=", "experiment=transfer"):
        assert must in commands, must
    first = SHELL_BLOCKS[0][2].splitlines()
    assert [ln.split("#")[0].strip() for ln in first] == ["make sweep", "make test"]  # the README's first two commands


def seed_embedding_cache(src: Path, dst: Path) -> None:
    """The repo's embedding cache into the copy (hard links where the file system allows, else copies): derived data keyed
    by content and embedder code (in a whole `make test` earlier tests have filled it with LoCoMo's MiniLM vectors), so the
    LoCoMo sweeps read the same vectors instead of embedding 7,868 texts again; empty, the blocks embed as a user would. No block tests the cache, and the cache only ever adds shards (written aside, then renamed)."""
    def link(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    if src.is_dir():
        shutil.copytree(src, dst, copy_function=link)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    corpora = data_dir()
    if not (corpora / "locomo" / "locomo10.json").is_file():
        pytest.skip(f"the README commands use the real corpora: LoCoMo not at {corpora} (set BENCH_DATA_DIR)")
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in the repo (make test creates it)")
    root = tmp_path_factory.mktemp("readme")
    repo = root / "recallbench"
    shutil.copytree(REPO, repo, ignore=COPY_IGNORE, symlinks=True)
    (repo / ".venv").symlink_to(REPO / ".venv")
    seed_embedding_cache(REPO / "reports" / "cache" / "embeddings", repo / "reports" / "cache" / "embeddings")
    home = root / "home"
    home.mkdir()
    (home / "corpora").symlink_to(corpora.resolve())
    shutil.copytree(REPO / "datasets" / "demo", home / "my-data")
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATA_DIR", "VIRTUAL_ENV", "PYTHONPATH") and not k.startswith("PYTEST")}
    env.update(HOME=str(home), PATH=f"{repo / '.venv' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9", HF_HUB_OFFLINE="1",
               PYTEST_ADDOPTS="--collect-only -q")  # `make test` inside this test: collect the suite, do not recurse into it
    return repo, env, root


@pytest.mark.slow
@pytest.mark.timeout(1500)  # a block may run up to 1200 s
@pytest.mark.parametrize("name,index,body", SHELL_BLOCKS, ids=[f"{n}#{i}" for n, i, _ in SHELL_BLOCKS])
def test_readme_block_runs_as_written(sandbox, name, index, body):
    repo, env, root = sandbox
    proc = subprocess.run(["bash", "-e", "-c", body], cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    out = proc.stdout + proc.stderr
    with open(root / "commands.log", "a") as log:
        log.write(f"### {name} block {index}: exit {proc.returncode}\n{body}\n")
    assert "Traceback (most recent call last)" not in out, f"{name} block {index}:\n{body}\n{out[-4000:]}"
    if body.lstrip().startswith("# needs: network"):
        assert proc.returncode != 0 and ("error" in out.lower() or "failed" in out.lower()), out[-2000:]
        return
    assert proc.returncode == 0, f"{name} block {index} exited {proc.returncode}:\n{body}\n{out[-4000:]}"
