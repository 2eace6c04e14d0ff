"""The backend contract, checked for EVERY configs/backend/*.yaml (found by glob: a new store is picked up),
in both store layouts (``backend.layout``: shared, per_conversation; bench/backends/layout.py).

A store whose capabilities name a local server gets it from the one starter
(``bench.backends.servers.started_servers``, through the session fixture ``local_servers``); for
other configs a fixture ``server_<name>`` is requested when one exists (the Pinecone protocol double).
The YAML is built by ``bench.backends.catalog.load_backend`` with ``paths.stores = <tmp>``, ``path``
(when the YAML has one), a unique ``collection`` and the server overrides. ``open()`` raising
BackendUnavailable skips with its reason.

Data: 3 conversations x 60 rows, 384-d, 6 shared clusters, seeded; roles alternate; timestamps
hourly with a few unknown (0.0). Every store is held against bench.backends.exact.ExactBackend.
Approximate stores (capabilities.exact False) must reach mean recall@10 >= RECALL_FLOOR unfiltered.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import numpy as np
import pytest

from bench.backends import catalog
from bench.backends.base import (
    FILTER_KINDS,
    LOCAL_SERVER,
    BackendUnavailable,
    Capabilities,
)
from bench.backends.exact import ExactBackend
from bench.backends.layout import LAYOUTS, PER_CONVERSATION, sub_collection
from bench.backends.scores import METRICS, native_of, similarity
from bench.resources import plugin_names
from bench.types import Hits, MemoryBatch, Where, memory_key
from bench.replay.visibility import admits
from server_fixtures import server_unavailable

REPO = Path(__file__).resolve().parents[2]
CONFIGS = plugin_names("backend")  # configs/backend/*.yaml

DIM = 384
N_CONV, PER_CONV, N_CLUSTERS = 3, 60, 6
K = 10
N_QUERIES = 30
RECALL_FLOOR = 0.90  # approximate stores: mean unfiltered recall@10 vs exact on this easy 180-row set
SIM_TOL = 1e-4
TIE_TOL = 1e-5  # exact stores may order near-equal neighbours differently at the k-th place (float32)
T0 = 1_700_000_000.0


def declared_clients(name: str):
    """The client packages ``configs/backend/<name>.yaml``'s store declares (``Capabilities.clients``), first the one open() imports."""
    return catalog.capabilities(name).clients


CLIENT_MODULES = {c.module for n in CONFIGS for c in declared_clients(n)}  # no adapter may import one at import time


# ---------------------------------------------------------------- data
def make_data(seed: int = 7):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(N_CLUSTERS, DIM))
    ids, vecs, convs, roles, ts = [], [], [], [], []
    for c in range(N_CONV):
        for p in range(PER_CONV):
            v = centers[rng.integers(N_CLUSTERS)] + 0.8 * rng.normal(size=DIM)
            vecs.append(v / np.linalg.norm(v))
            ids.append(memory_key(f"conv-{c}", f"D{p // 20 + 1}:{p % 20 + 1}"))
            convs.append(f"conv-{c}")
            roles.append("user" if p % 2 == 0 else "assistant")
            ts.append(0.0 if p % 15 == 7 else T0 + 3600.0 * p)  # a few unknown times
    vectors = np.asarray(vecs, dtype=np.float32)
    q = vectors[rng.choice(len(ids), N_QUERIES, replace=False)] + 0.05 * rng.normal(size=(N_QUERIES, DIM))
    queries = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    return ids, vectors, convs, roles, ts, queries


IDS, VECTORS, CONVS, ROLES, TS, QUERIES = make_data()
ROW = {i: n for n, i in enumerate(IDS)}


def batch(rows) -> MemoryBatch:
    rows = list(rows)
    return MemoryBatch(
        ids=tuple(IDS[r] for r in rows),
        vectors=VECTORS[rows],
        conversation_ids=tuple(CONVS[r] for r in rows),
        roles=tuple(ROLES[r] for r in rows),
        timestamps=tuple(TS[r] for r in rows),
    )


def matching(where: Where) -> list[int]:
    """Rows a store must return for ``where``: the one visibility rule (bench.replay.visibility)."""
    return [r for r in range(len(IDS)) if admits(where, conversation_id=CONVS[r], role=ROLES[r], timestamp=TS[r])]


FILTERS = {  # name -> (Where, filter kinds it needs)
    "conversation": (Where(conversation_id="conv-1"), {"conversation"}),
    "role": (Where(roles=("user",)), {"role"}),
    "before": (Where(before=T0 + 3600.0 * 25), {"before"}),
    "combined": (Where(conversation_id="conv-2", roles=("assistant",), before=T0 + 3600.0 * 30), FILTER_KINDS - {"metadata"}),
    "no-match": (Where(conversation_id="conv-missing"), {"conversation"}),
}


# ---------------------------------------------------------------- instantiate / fixtures
def server_overrides(request, name: str) -> dict:
    if catalog.capabilities(name).kind == LOCAL_SERVER:
        return request.getfixturevalue("local_servers")(name).overrides()
    try:
        return dict(request.getfixturevalue(f"server_{name}"))
    except pytest.FixtureLookupError:
        return {}  # no server needed


def instantiate(name: str, stores_dir: Path, overrides: dict, collection: str, layout: str = "shared"):
    kwargs = {**overrides, "layout": layout}
    if "path" in catalog.backend_config(name):
        kwargs.setdefault("path", str(stores_dir / name))
    kwargs["collection"] = collection
    return catalog.load_backend(name, stores_dir=stores_dir, **kwargs)


def unique_collection() -> str:
    return f"rbct_{uuid.uuid4().hex[:12]}"


def open_or_skip(backend) -> None:
    try:
        backend.open(dim=DIM, metric="cosine")
    except BackendUnavailable as e:
        server_unavailable(f"{type(backend).__name__} unavailable here: {e}")


class Maker:
    """Creates backends for one config; drops and closes every one at teardown."""

    def __init__(self, name: str, overrides: dict, stores_dir: Path, layout: str = "shared") -> None:
        self.name, self.overrides, self.stores_dir, self.layout = name, overrides, stores_dir, layout
        self.made: list = []

    def new(self, collection: str | None = None):
        b = instantiate(self.name, self.stores_dir, self.overrides, collection or unique_collection(), self.layout)
        self.made.append(b)
        return b

    def cleanup(self) -> None:
        for b in reversed(self.made):
            try:
                b.drop()
            finally:
                b.close()


@pytest.fixture(scope="module")
def exact():
    ref = ExactBackend()
    ref.open(dim=DIM)
    ref.add(batch(range(len(IDS))))
    ref.wait_ready()
    return ref


@pytest.fixture(scope="module", params=[(n, lay) for n in CONFIGS for lay in LAYOUTS], ids=lambda p: "-".join(p))
def maker(request, tmp_path_factory):
    name, layout = request.param
    missing = [c for c in declared_clients(name) if importlib.util.find_spec(c.module) is None]
    if missing:
        pytest.skip(f"{name}: its client package {missing[0].package} is not installed (pip install 'recallbench[{missing[0].extra}]')")
    m = Maker(name, server_overrides(request, name), tmp_path_factory.mktemp(f"stores_{name}_{layout}"), layout)
    yield m
    m.cleanup()


@pytest.fixture(scope="module")
def loaded(maker):
    """One store per config holding the whole data set (added in two batches), shared by read-only checks."""
    b = maker.new()
    open_or_skip(b)
    b.add(batch(range(0, 100)))
    b.add(batch(range(100, len(IDS))))
    b.wait_ready(timeout_s=120)
    return b


# ---------------------------------------------------------------- helpers
def assert_well_formed(hits, query: np.ndarray, label: str, kind: str | None = None) -> None:
    """Check 5: columnar Hits, sorted descending, no duplicate ids, similarities match exact cosine."""
    assert isinstance(hits, Hits), f"{label}: search returned {type(hits).__name__}, not Hits"
    assert all(type(i) is str for i in hits.ids) and all(type(s) is float for s in hits.scores), f"{label}: {hits!r}"
    ids = [h.id for h in hits]
    assert len(ids) == len(set(ids)), f"{label}: duplicate ids {ids}"
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True), f"{label}: not sorted best first: {scores}"
    for h in hits:
        assert h.id in ROW, f"{label}: unknown id {h.id!r}"
        true = float(VECTORS[ROW[h.id]] @ query)
        assert abs(h.score - true) <= SIM_TOL, f"{label}: {h.id} score {h.score} vs exact cosine {true}"
    # the store's own score of each hit (bench.backends.scores), kept beside the similarity made from it
    assert len(hits.native) == len(hits.ids), f"{label}: {len(hits.native)} native scores for {len(hits.ids)} hits"
    assert all(type(x) is float for x in hits.native), f"{label}: native scores {hits.native!r}"
    if kind is not None:
        assert list(hits.scores) == [similarity(kind, x) for x in hits.native], f"{label}: similarity is not {kind} converted"


def same_up_to_ties(got: list[str], want_hits, query: np.ndarray) -> bool:
    """Same id set as the exact top-k, allowing swaps among rows tied (within TIE_TOL) at the k-th score."""
    want = [h.id for h in want_hits]
    if len(got) != len(want):
        return False
    kth = want_hits[-1].score
    for i in set(want) ^ set(got):
        if abs(float(VECTORS[ROW[i]] @ query) - kth) > TIE_TOL:
            return False
    return True


def recall(got: list[str], want: list[str]) -> float:
    return len(set(got) & set(want)) / len(want) if want else 1.0


# ---------------------------------------------------------------- checks
def test_declares_contract(maker):
    b = maker.new()
    assert isinstance(b.name, str) and b.name
    caps = b.capabilities
    assert isinstance(caps, Capabilities)
    assert caps.filters <= FILTER_KINDS
    assert caps.max_k >= 100
    for method in ("open", "add", "wait_ready", "search", "reference_query", "close", "drop"):
        assert callable(getattr(b, method)), method
    assert caps.kind == ("embedded" if not caps.server else "local server" if caps.local_server else "cloud")


@pytest.mark.parametrize("name", CONFIGS)
def test_a_missing_client_is_one_line_naming_the_store_and_the_extra(name, monkeypatch, tmp_path):
    """Store clients are optional extras: hiding the client module the store declares first makes open() say what to
    install, in one line."""
    b = instantiate(name, tmp_path, {}, unique_collection())
    if not b.capabilities.clients:
        pytest.skip(f"{name} declares no client package (numpy only)")
    first = b.capabilities.clients[0]
    monkeypatch.setitem(sys.modules, first.module, None)  # `import module` now fails as if it were not installed
    with pytest.raises(BackendUnavailable) as err:
        b.open(dim=DIM, metric="cosine")
    assert str(err.value) == f"store {name.removesuffix('_server')} needs the {first.package} package: pip install 'recallbench[{first.extra}]'"


def requirement_name(requirement: str) -> str:
    """``"psycopg[binary]>=3.2"`` -> ``"psycopg"`` (PEP 503 normalised)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]).lower()


def installed_dependencies(packages) -> set[str]:
    """The packages the installed ``packages`` require (pylibseekdb comes with pyseekdb)."""
    out = set()
    for p in packages:
        try:
            out |= {requirement_name(r) for r in importlib.metadata.requires(p) or ()}
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def test_requirement_name_reads_a_pyproject_requirement():
    assert requirement_name("psycopg[binary]>=3.2") == "psycopg"
    assert requirement_name("sqlean.py>=3.45") == "sqlean-py"
    assert requirement_name("qdrant-edge-py>=0.9") == "qdrant-edge-py"


@pytest.mark.parametrize("name", CONFIGS)
def test_every_declared_client_is_installed_by_its_extra(name):
    """The extra a store names exists in pyproject.toml and installs the package it names (a typo in either is caught here,
    not by a user following the error message)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for c in declared_clients(name):
        assert c.extra in extras, f"configs/backend/{name}.yaml: store declares extra {c.extra!r}, not in pyproject.toml"
        direct = {requirement_name(r) for r in extras[c.extra]}
        assert requirement_name(c.package) in direct | installed_dependencies(direct), \
            f"configs/backend/{name}.yaml: extra {c.extra!r} does not install {c.package}"
        assert c.extra in re.sub(r"[\[\]\"]", ",", " ".join(extras["all"])).split(","), f"extra {c.extra!r} is not in recallbench[all]"


def test_importing_backend_modules_imports_no_client():
    targets = sorted({catalog.backend_config(n)["_target_"].rsplit(".", 1)[0] for n in CONFIGS})
    code = (
        "import sys, json, importlib\n"
        f"for m in {targets!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    loaded_tops = set(json.loads(out.stdout))
    assert not (loaded_tops & CLIENT_MODULES), f"importing {targets} imported {loaded_tops & CLIENT_MODULES}"


def test_topk_matches_exact(loaded, exact):
    """Check 1: exact stores return the exact top-k; approximate ones reach the recall floor."""
    recalls = []
    for n, q in enumerate(QUERIES):
        want = exact.search(q, k=K, where=Where())
        got = loaded.search(q, k=K, where=Where())
        assert_well_formed(got, q, f"query {n}", loaded.capabilities.native_kind(loaded.metric))
        got_ids = [h.id for h in got]
        if loaded.capabilities.exact:
            assert same_up_to_ties(got_ids, want, q), f"query {n}: {got_ids} != exact {[h.id for h in want]}"
        recalls.append(recall(got_ids, [h.id for h in want]))
    mean = float(np.mean(recalls))
    if not loaded.capabilities.exact:
        print(f"{loaded.name}: recall@{K} {mean:.3f} (shortfall {1 - mean:.3f}; floor {RECALL_FLOOR})")
        assert mean >= RECALL_FLOOR
    else:
        assert mean == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("filter_name", list(FILTERS))
def test_filters_honoured(loaded, exact, filter_name):
    """Check 2: every hit satisfies the filter; exact stores return exactly min(k, matching)."""
    where, kinds = FILTERS[filter_name]
    if not kinds <= loaded.capabilities.filters:
        pytest.skip(f"{loaded.name} does not filter on {sorted(kinds - loaded.capabilities.filters)} natively")
    allowed = {IDS[r] for r in matching(where)}
    for k in (K, 100):
        for n, q in enumerate(QUERIES[:10]):
            got = loaded.search(q, k=k, where=where)
            label = f"{filter_name} k={k} query {n}"
            assert {h.id for h in got} <= allowed, f"{label}: non-matching ids {[h.id for h in got if h.id not in allowed]}"
            assert_well_formed(got, q, label, loaded.capabilities.native_kind(loaded.metric))
            assert len(got) <= k
            if loaded.capabilities.exact:
                assert len(got) == min(k, len(allowed)), f"{label}: {len(got)} hits, expected {min(k, len(allowed))}"
                want = exact.search(q, k=k, where=where)
                assert same_up_to_ties([h.id for h in got], want, q) if want else got == [], label


@pytest.mark.parametrize("filter_name", ["none", *FILTERS])
def test_reference_query_is_the_same_query(loaded, filter_name):
    """The hand-written reference query (make bench P4) returns what search returns: the same rows and similarities."""
    where, kinds = (Where(), set()) if filter_name == "none" else FILTERS[filter_name]
    if not kinds <= loaded.capabilities.filters:
        pytest.skip(f"{loaded.name} does not filter on {filter_name} natively")
    for q in QUERIES[:5]:
        hits = loaded.search(q, k=K, where=where)
        ids, sims = loaded.reference_query(q, k=K, where=where)
        assert sorted(ids) == sorted(hits.ids), filter_name
        got = dict(zip(ids, sims))
        assert all(abs(got[i] - s) <= SIM_TOL for i, s in zip(hits.ids, hits.scores)), filter_name


def test_filter_fixture_sizes():
    """The filters above select what they were designed to (hand-worked from make_data's layout)."""
    assert len(matching(FILTERS["conversation"][0])) == 60
    assert len(matching(FILTERS["role"][0])) == 90
    # per conversation: positions 0..25 (26 rows, incl. the unknown-time 7 and 22) + unknown-time 37 and 52
    assert len(matching(FILTERS["before"][0])) == 3 * (26 + 2)
    # conv-2 assistants = odd positions: 1..29 (15 rows) + the unknown-time odd position 37
    assert len(matching(FILTERS["combined"][0])) == 16
    assert matching(FILTERS["no-match"][0]) == []


def test_read_your_writes(maker):
    """Check 3: rows added after a first batch are found by their own vector once wait_ready returns.

    Approximate stores are held to it too (base.Backend.wait_ready): on 46 rows a filtered search with
    ef >= the row count is exhaustive over what the graph reaches, so a miss here is a row the store's
    index cannot reach at all, which wait_ready must detect and repair (chroma strands one of the 6 new
    rows in ~2 % of collections: a parallel hnswlib batch insert leaves a node without in-edges)."""
    b = maker.new()
    open_or_skip(b)
    b.add(batch(range(0, 40)))
    b.wait_ready(timeout_s=120)
    new_rows = list(range(60, 66))  # conv-1 rows
    b.add(batch(new_rows))
    b.wait_ready(timeout_s=120)
    for r in new_rows:
        got = [h.id for h in b.search(VECTORS[r], k=3, where=Where(conversation_id="conv-1"))]
        assert IDS[r] in got, (f"{IDS[r]} not found after wait_ready: {got} "
                               f"(reported unreachable: {sorted(getattr(b, 'unreachable', ()))})")


def test_persistence_across_reopen(maker):
    """Check 4: persistent stores find their data from a new instance on the same path/collection."""
    first = maker.new()
    if not first.capabilities.persistent:
        pytest.skip(f"{first.name} is not persistent")
    open_or_skip(first)
    rows = list(range(0, 60))
    first.add(batch(rows))
    first.wait_ready(timeout_s=120)
    before = [h.id for h in first.search(QUERIES[0], k=5, where=Where())]
    first.close()
    second = maker.new(collection=first.collection)
    open_or_skip(second)
    second.wait_ready(timeout_s=120)
    after = [h.id for h in second.search(QUERIES[0], k=5, where=Where())]
    assert len(before) == 5
    assert after == before
    for r in (0, 30, 59):
        assert IDS[r] in [h.id for h in second.search(VECTORS[r], k=3, where=Where())]


def test_drop_then_open_is_empty(maker):
    """Check 6: drop() removes the data; open() afterwards gives an empty collection; drop is idempotent."""
    b = maker.new()
    open_or_skip(b)
    b.add(batch(range(0, 30)))
    b.wait_ready(timeout_s=120)
    assert b.search(QUERIES[0], k=5, where=Where())
    b.drop()
    b.drop()
    b.open(dim=DIM, metric="cosine")
    assert b.search(QUERIES[0], k=5, where=Where()) == []
    assert b.search(VECTORS[3], k=5, where=Where(conversation_id="conv-0")) == []



def test_layout_is_what_it_says(loaded):
    """shared: one collection; per_conversation: one per conversation (3 here) holding only that conversation's rows,
    named so that every store takes the name unchanged (list_collections returns it as given)."""
    if loaded.layout != PER_CONVERSATION:
        assert loaded.layout == "shared" and not hasattr(loaded, "n_collections")
        return
    assert loaded.n_collections == N_CONV
    names = [sub_collection(loaded.collection, f"conv-{c}") for c in range(N_CONV)]
    assert set(names) <= set(loaded.list_collections())
    for c, name in enumerate(names):
        got = loaded.sub(name).search(QUERIES[0], k=100, where=Where())  # all of it: 60 rows
        assert len(got) == PER_CONV if loaded.capabilities.exact else len(got) > 0
        assert {CONVS[ROW[i]] for i in got.ids} == {f"conv-{c}"}


# ---------------------------------------------------------------- metrics (bench/backends/scores.py)
# the cosine (every store's default) is checked on every search of the checks above (assert_well_formed); here the others
METRIC_CASES = [(n, m) for n in CONFIGS for m in catalog.capabilities(n).metrics if m != "cosine"]


@pytest.mark.parametrize(("name", "metric"), METRIC_CASES, ids=lambda p: p)
def test_every_declared_metric_returns_its_native_score(name, metric, request, tmp_path):
    """Every metric a store config declares (``Capabilities.scores``): each hit's native score is the number its kind
    says for the hit's exact cosine, the similarity is that number converted (bench.backends.scores), best first."""
    missing = [c for c in declared_clients(name) if importlib.util.find_spec(c.module) is None]
    if missing:
        pytest.skip(f"{name}: its client package {missing[0].package} is not installed")
    b = instantiate(name, tmp_path, {**server_overrides(request, name), "metric": metric}, unique_collection())
    kind = b.capabilities.native_kind(metric)
    try:
        try:
            b.open(dim=DIM)
        except BackendUnavailable as e:
            server_unavailable(f"{name} unavailable here: {e}")
        b.add(batch(range(PER_CONV)))  # one conversation
        b.wait_ready(timeout_s=120)
        for n, q in enumerate(QUERIES[:5]):
            hits = b.search(q, k=K, where=Where())
            assert len(hits) and len(hits.native) == len(hits.ids), f"{name} {metric} query {n}: no native scores"
            for i, s, x in zip(hits.ids, hits.scores, hits.native):
                true = float(VECTORS[ROW[i]] @ q)
                assert abs(s - true) <= SIM_TOL, f"{name} {metric}: {i} similarity {s} vs exact cosine {true}"
                assert s == similarity(kind, x), f"{name} {metric}: {i} similarity {s} is not {kind} {x} converted"
                assert abs(x - float(native_of(kind, true))) <= 1e-3, f"{name} {metric}: {i} native {x} is not {kind} of {true}"
            assert list(hits.scores) == sorted(hits.scores, reverse=True)
    finally:
        b.drop()
        b.close()


@pytest.mark.parametrize("name", CONFIGS)
def test_a_metric_not_declared_is_one_line_naming_the_store(name, tmp_path):
    offered = catalog.capabilities(name).metrics
    assert offered and offered[0] == "cosine" and set(offered) <= set(METRICS)
    assert catalog.backend_config(name).get("metric", "cosine") in offered  # the YAML's metric is one it offers
    for metric in set(METRICS) - set(offered):
        with pytest.raises(ValueError, match=rf"metric '{metric}' is not offered by this store \(it offers {', '.join(offered)}\)"):
            catalog.load_backend(name, stores_dir=tmp_path, metric=metric)

