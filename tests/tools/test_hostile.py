"""Every hostile-input check (bench/tools/harden/hostile_*.py) is handled on this tree."""

from __future__ import annotations

import pytest

from bench.tools.harden.hostile import CLASSES, checks, run_check, table


def test_every_check_names_a_known_class():
    assert all(c.klass in CLASSES for c in checks())


@pytest.mark.slow  # each case runs the CLI
@pytest.mark.parametrize("check", checks(), ids=lambda c: f"{c.klass}:{c.name}")
def test_hostile_input_is_handled(check, tmp_path):
    r = run_check(check, tmp_path)
    assert r.handled, table([r])
