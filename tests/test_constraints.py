"""constraints.txt (what `make install` and CI install) agrees with pyproject.toml (what `pip install .` resolves).

A dependency added to pyproject.toml, or a range moved past the pinned release, without `make lock` fails here,
naming the package; the pins stay pins (``==``) and never drag in torch (a CUDA build of several GB).
"""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent


def pins() -> dict[str, str]:
    out = {}
    for n, line in enumerate((REPO / "constraints.txt").read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s;]+)", line)
        assert m, f"constraints.txt: line {n}: {line!r} is not 'name==version' (make lock writes pip freeze)"
        out[canonicalize_name(m[1])] = m[2]
    return out


def requirements() -> list[Requirement]:
    """Every requirement `make install` asks for: the dependencies and the extras of .[all,test], expanded."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    out, todo, seen = [Requirement(r) for r in project["dependencies"]], ["all", "test"], set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for r in map(Requirement, extras[extra]):
            if canonicalize_name(r.name) == canonicalize_name(project["name"]):
                todo += sorted(r.extras)
            else:
                out.append(r)
    return out


def test_every_requirement_of_make_install_is_pinned_inside_its_range():
    pinned = pins()
    for r in requirements():
        name = canonicalize_name(r.name)
        assert name in pinned, f"constraints.txt does not pin {r.name} (pyproject.toml asks {r}): run make lock"
        assert r.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {r.name}=={pinned[name]}, outside pyproject.toml's {r}: run make lock")


def test_the_pins_leave_the_project_setuptools_and_torch_out():
    pinned = pins()
    assert "recallbench" not in pinned and "setuptools" not in pinned
    assert not {"torch", "torchvision", "torchaudio"} & set(pinned)
    assert not [n for n in pinned if n.startswith("nvidia-")]


def test_make_installs_with_the_constraints_and_reinstalls_when_they_change():
    make = (REPO / "Makefile").read_text()
    assert "LOCK := constraints.txt" in make
    assert re.search(r"^\$\(STAMP\): pyproject\.toml \$\(LOCK\)$", make, re.M)
    assert "-m pip install -q -c $(LOCK) -e '.[all,test]'" in make
    assert "make test" in (REPO / ".ci" / "run").read_text()
