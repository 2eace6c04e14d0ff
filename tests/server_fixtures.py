"""Session fixtures that run the REAL seekdb and chroma servers on 127.0.0.1 (free ports).

``server_seekdb_server`` and ``server_chroma_server`` start their server once per test session,
yield the backend constructor overrides (``{"host": "127.0.0.1", "port": N}``), stop the server
and delete its data at teardown, and skip with the reason when the server cannot start here.
They are named ``server_<backend config name>`` so the contract test finds them.

The process management itself lives in ``bench.backends.servers`` (re-exported here as
``run_seekdb_server(base_dir, port)`` / ``run_chroma_server(path, port)`` for other code).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from bench.backends.servers import (
    ServerInfo,
    ServerStartError,
    chroma_cli,
    run_chroma_server,
    run_seekdb_server,
    seekdb_binary,
)

__all__ = [
    "run_chroma_server",
    "run_seekdb_server",
    "seekdb_server_info",
    "chroma_server_info",
    "server_seekdb_server",
    "server_chroma_server",
]


def _serve(kind: str, find_binary, run, tmp_path_factory) -> Iterator[ServerInfo]:
    try:
        find_binary()
    except FileNotFoundError as exc:
        pytest.skip(f"{kind} server cannot run here: {exc}")
    data = tmp_path_factory.mktemp(f"{kind}_server")
    cm = run(data, None)
    try:
        info = cm.__enter__()
    except ServerStartError as exc:
        shutil.rmtree(data, ignore_errors=True)
        pytest.skip(f"{kind} server cannot start here: {exc}")
    try:
        yield info
    finally:
        cm.__exit__(None, None, None)
        shutil.rmtree(data, ignore_errors=True)  # seekdb takes ~1.2 GB: do not leave it to pytest's retention


@pytest.fixture(scope="session")
def seekdb_server_info(tmp_path_factory) -> Iterator[ServerInfo]:
    """The running seekdb server (ServerInfo: host, port, pid, log path, start time)."""
    yield from _serve("seekdb", seekdb_binary, run_seekdb_server, tmp_path_factory)


@pytest.fixture(scope="session")
def chroma_server_info(tmp_path_factory) -> Iterator[ServerInfo]:
    """The running chroma server (ServerInfo: host, port, pid, log path, start time)."""
    yield from _serve("chroma", chroma_cli, run_chroma_server, tmp_path_factory)


@pytest.fixture(scope="session")
def server_seekdb_server(seekdb_server_info: ServerInfo) -> dict[str, object]:
    """Constructor overrides for configs/backend/seekdb_server.yaml."""
    return seekdb_server_info.overrides()


@pytest.fixture(scope="session")
def server_chroma_server(chroma_server_info: ServerInfo) -> dict[str, object]:
    """Constructor overrides for configs/backend/chroma_server.yaml."""
    return chroma_server_info.overrides()
