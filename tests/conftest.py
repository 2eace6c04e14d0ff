"""Shared fixtures. Server fixtures live in their own modules and are re-exported here.

A contract-test fixture named ``server_<backend config name>`` (e.g. ``server_seekdb_server``)
starts the real server for that config and yields a dict of constructor overrides
(host/port/...); it skips with a clear reason when the server cannot run here.
"""

import os
from pathlib import Path

import pytest
from pinecone_fixtures import *  # noqa: F401,F403  (loopback Pinecone data-plane server)
from server_fixtures import *  # noqa: F401,F403  (seekdb and chroma servers)

REPO = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    return Path(os.environ.get("BENCH_DATA_DIR", REPO / "datasets")).resolve()


@pytest.fixture(scope="session")
def bench_data_dir() -> Path:
    return data_dir()
