"""Fixture ``server_pinecone``: the loopback Pinecone data-plane PROTOCOL TEST DOUBLE (bench/tools/harden/doubles.py).

Session-scoped. Starts the double on 127.0.0.1 (free port), plants a dummy key in a test-only
environment variable (never PINECONE_API_KEY, so a real key in the environment is left alone and
never sent anywhere), and yields the constructor overrides for configs/backend/pinecone.yaml.
Writes become visible after a small delay so wait_ready() is really exercised.
Its latency says nothing about Pinecone.
"""

from __future__ import annotations

import os

import pytest
from server_fixtures import server_unavailable

from bench.tools.harden.doubles import PineconeTestServer

PINECONE_TEST_KEY_ENV = "RECALLBENCH_TEST_PINECONE_KEY"
PINECONE_TEST_KEY = "test-double-key-not-a-secret"
PINECONE_VISIBILITY_DELAY_S = 0.15

__all__ = ["server_pinecone"]


@pytest.fixture(scope="session")
def server_pinecone():
    try:
        import pinecone  # noqa: F401
    except ImportError as e:
        server_unavailable(f"pinecone SDK not installed ({e}): cannot exercise the Pinecone backend")
    old = os.environ.get(PINECONE_TEST_KEY_ENV)
    os.environ[PINECONE_TEST_KEY_ENV] = PINECONE_TEST_KEY
    server = PineconeTestServer(PINECONE_TEST_KEY, visibility_delay_s=PINECONE_VISIBILITY_DELAY_S)
    try:
        server.start()
    except OSError as e:
        server_unavailable(f"cannot start the loopback Pinecone test double on 127.0.0.1: {e}")
    try:
        yield {"host": server.host, "api_key_env": PINECONE_TEST_KEY_ENV}
    finally:
        server.stop()
        if old is None:
            os.environ.pop(PINECONE_TEST_KEY_ENV, None)
        else:
            os.environ[PINECONE_TEST_KEY_ENV] = old
