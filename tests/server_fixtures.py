"""Session fixtures that run the REAL seekdb and chroma servers on 127.0.0.1 (free ports).

``local_servers`` is a function ``store name -> ServerInfo``: it starts the server the store needs
with the one starter (``bench.backends.servers.started_servers``) the first time it is asked, keeps
it for the whole test session, stops it and deletes its data at teardown, and skips (with the
reason) when the server cannot run here -- or, when ``RECALLBENCH_REQUIRE_SERVERS=1`` (``.ci/run`` sets it), fails
with that reason (``server_unavailable``): in CI a server that cannot start is a broken install, never a quiet
skip. ``seekdb_server_info`` / ``chroma_server_info`` and
``server_seekdb_server`` / ``server_chroma_server`` (constructor overrides) are built on it; the
contract test asks ``local_servers`` for any store whose capabilities name a local server.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import NoReturn

import pytest

from bench.backends.servers import ServerInfo, ServerStartError, started_servers

REQUIRE_SERVERS = "RECALLBENCH_REQUIRE_SERVERS"

__all__ = [
    "REQUIRE_SERVERS",
    "server_unavailable",
    "local_servers",
    "seekdb_server_info",
    "chroma_server_info",
    "server_seekdb_server",
    "server_chroma_server",
]


def server_unavailable(reason: str) -> NoReturn:
    """Skip the test with ``reason``; fail it instead when ``RECALLBENCH_REQUIRE_SERVERS=1`` (CI: every server must run)."""
    if os.environ.get(REQUIRE_SERVERS, "") == "1":
        pytest.fail(f"{reason} ({REQUIRE_SERVERS}=1: every test server must start here)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def local_servers(tmp_path_factory) -> Iterator[Callable[[str], ServerInfo]]:
    """``get(store)``: the running server for ``store`` (started on first use), or a skip saying why it cannot run."""
    running: dict[str, ServerInfo] = {}
    failed: dict[str, str] = {}
    dirs = []
    with ExitStack() as stack:

        def get(store: str) -> ServerInfo:
            if store in failed:
                server_unavailable(failed[store])
            if store not in running:
                data = tmp_path_factory.mktemp(f"{store}_")
                dirs.append(data)
                try:
                    started = stack.enter_context(started_servers([store], data))
                except (FileNotFoundError, ServerStartError) as exc:
                    failed[store] = f"{store} server cannot run here: {exc}"
                    server_unavailable(failed[store])
                running[store] = started[store]
            return running[store]

        try:
            yield get
        finally:
            stack.close()
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)  # seekdb takes ~1.2 GB: do not leave it to pytest's retention


@pytest.fixture(scope="session")
def seekdb_server_info(local_servers) -> ServerInfo:
    """The running seekdb server (ServerInfo: host, port, pid, log path, start time)."""
    return local_servers("seekdb_server")


@pytest.fixture(scope="session")
def chroma_server_info(local_servers) -> ServerInfo:
    """The running chroma server (ServerInfo: host, port, pid, log path, start time)."""
    return local_servers("chroma_server")


@pytest.fixture(scope="session")
def server_seekdb_server(seekdb_server_info: ServerInfo) -> dict[str, object]:
    """Constructor overrides for configs/backend/seekdb_server.yaml."""
    return seekdb_server_info.overrides()


@pytest.fixture(scope="session")
def server_chroma_server(chroma_server_info: ServerInfo) -> dict[str, object]:
    """Constructor overrides for configs/backend/chroma_server.yaml."""
    return chroma_server_info.overrides()
