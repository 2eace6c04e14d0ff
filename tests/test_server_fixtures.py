"""A test server that cannot start: a skip with the reason on a developer's machine, a failure with it in CI."""

import pytest
from server_fixtures import REQUIRE_SERVERS, server_unavailable


def test_a_server_that_cannot_start_skips_with_its_reason(monkeypatch):
    monkeypatch.delenv(REQUIRE_SERVERS, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^chroma server cannot run here: no chroma$"):
        server_unavailable("chroma server cannot run here: no chroma")


def test_in_ci_a_server_that_cannot_start_fails_with_its_reason(monkeypatch):
    monkeypatch.setenv(REQUIRE_SERVERS, "1")  # what .ci/run exports
    with pytest.raises(pytest.fail.Exception) as err:
        server_unavailable("chroma server cannot run here: no chroma")
    assert str(err.value) == "chroma server cannot run here: no chroma (RECALLBENCH_REQUIRE_SERVERS=1: every test server must start here)"


def test_ci_requires_the_servers():
    from pathlib import Path

    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert f"export {REQUIRE_SERVERS}=1\n" in ci and ci.index(REQUIRE_SERVERS) < ci.index("make test")
