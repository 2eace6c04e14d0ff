"""Run identity: what decides a result, the cache keys made from it, and where a run writes.

The one owner of
- **cache keys**: a key is the sha256 of a canonical JSON of its *inputs*, and the inputs are kept
  beside it (``meta.json`` ``caches``), so a user can see why a cache was or was not reused. Keys are
  made from content, never from names or paths: the loaded corpus in a canonical form, the embedder's
  full identity (model file hashes, endpoint, dimension, preprocessing), store settings, depth, role
  filter, strategy parameters, and the source of the code that derives the artifact.
- **cached jobs**: a finished job's files with a manifest of their sha256; a cached job is reused
  only when every file still matches (else it is recomputed with one warning line).
- **unique names**: ``process_token()`` names this process's store collections and embedded store
  paths, so two runs at once never share one; run directories get a unique suffix (``run_id``).
- **reports/latest**: a symlink replaced atomically, only by a finished run.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent
RUN_ID_ENV = "RECALLBENCH_RUN_ID"  # shared by a command's processes (a multirun's workers): one run directory
MANIFEST = "manifest.json"


def canonical(obj) -> str:
    """Canonical JSON (sorted keys, no spaces; non-JSON values as ``str``)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def fingerprint(*parts, length: int = 16) -> str:
    """Short sha256 of the canonical JSON of ``parts``."""
    return hashlib.sha256(canonical(parts).encode("utf-8")).hexdigest()[:length]


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def corpus_digest(corpus) -> str:
    """sha256 of everything a loaded corpus holds (name, every turn, question and defect), in order.

    Independent of where the files lie; any edit of a turn, a question, a label or the loader's
    output changes it.
    """
    h = hashlib.sha256()
    h.update(canonical(["corpus-v1", corpus.name]).encode("utf-8"))
    for c in corpus.conversations:
        h.update(canonical(["c", c.conversation_id]).encode("utf-8"))
        for t in c.turns:
            h.update(canonical(["t", t.turn_id, t.role, t.speaker, t.text, t.timestamp, t.position, t.session]).encode("utf-8"))
            if t.metadata:  # only when present: a corpus without metadata keeps its digest
                h.update(canonical(["m", [[k, list(v) if isinstance(v, tuple) else v] for k, v in t.metadata]]).encode("utf-8"))
    for q in corpus.questions:
        h.update(canonical(["q", q.question_id, q.conversation_id, q.text, q.asked_at, list(q.evidence), q.category,
                            q.adversarial, q.answer]).encode("utf-8"))
    for d in corpus.defects:
        h.update(canonical(["d", d.file, d.record, d.field, d.kind, d.value, d.action]).encode("utf-8"))
    return h.hexdigest()


def turns_digest(corpus) -> str:
    """sha256 of the conversations alone (every turn, in order), not the questions or labels: two releases of
    one corpus that differ only in their labels share it."""
    h = hashlib.sha256()
    for c in corpus.conversations:
        h.update(canonical(["c", c.conversation_id]).encode("utf-8"))
        for t in c.turns:
            h.update(canonical(["t", t.turn_id, t.role, t.speaker, t.text, t.timestamp, t.position, t.session]).encode("utf-8"))
    return h.hexdigest()


def labels_digest(corpus) -> str:
    """sha256 of what scoring depends on: every question (id, conversation, text, time, category,
    adversarial flag, answer) and its gold evidence ids, in question-id order. Two runs may be compared
    only when their labels digests are equal (``recallbench compare`` and the regression gate check it)."""
    h = hashlib.sha256()
    h.update(canonical(["labels-v1", corpus.name]).encode("utf-8"))
    for q in sorted(corpus.questions, key=lambda q: q.question_id):
        h.update(canonical([q.question_id, q.conversation_id, q.text, q.asked_at, sorted(q.evidence), q.category,
                            q.adversarial, q.answer]).encode("utf-8"))
    return h.hexdigest()


@functools.cache
def code_digest(*modules: str) -> str:
    """sha256 of the source of the named package modules (``"runner"``, ``"backends/seekdb"``; a
    folder name takes every ``.py`` under it; ``"*"`` the whole package): the version of the code
    that derives an artifact. Any edit of that code invalidates what it made."""
    files: list[Path] = []
    for m in modules:
        p = PACKAGE_DIR / m
        if m == "*":
            files += sorted(PACKAGE_DIR.rglob("*.py"))
        elif p.is_dir():
            files += sorted(p.rglob("*.py"))
        else:
            files.append(p.with_suffix(".py"))
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(PACKAGE_DIR)).encode())
        h.update(f.read_bytes() if f.exists() else b"<missing>")
    return h.hexdigest()[:16]


def module_of(target: str) -> str:
    """Package-relative module path of a ``_target_`` inside ``bench`` (e.g. ``backends/seekdb``), else ''."""
    parts = str(target or "").split(".")
    if not parts or parts[0] != "bench":
        return ""
    for n in range(len(parts), 1, -1):
        rel = "/".join(parts[1:n])
        if (PACKAGE_DIR / f"{rel}.py").exists():
            return rel
    return ""


@dataclass(frozen=True)
class Key:
    """A cache key: ``kind`` (embeddings, trace, job), its inputs, and their digest."""

    kind: str
    inputs: Mapping = field(default_factory=dict)

    def __post_init__(self) -> None:  # a secret in the inputs (a key in a URL's query string) is kept as its digest only
        from bench.output import hash_secrets

        object.__setattr__(self, "inputs", hash_secrets(dict(self.inputs)))

    @property
    def digest(self) -> str:
        return fingerprint(self.kind, self.inputs)

    def describe(self) -> dict:
        return {"key": self.digest, "inputs": dict(self.inputs)}


# Store settings that say where a store writes, not what it computes.
STORE_PLACE_FIELDS = ("path", "collection")
TRACE_CODE = ("replay/trace", "types", "backends/base", "backends/layout", "backends/scores", "replay/visibility")  # layout: a store's per-conversation collections


def trace_key(*, corpus_sha: str, embedder: Mapping, backend: Mapping, depth: int, roles, warmup: int,
              metadata_filter: Mapping | None = None, replay: Mapping | None = None) -> Key:
    """What decides a trace: the corpus content, the embedder, the store and its settings, the
    search depth, the role filter, the metadata filter (in the key only when set), the warm-up, and the
    replay + store adapter code. ``replay``: a live replay's settings (``bench.replay.live``; None: batch replay, whose
    keys stay as they were)."""
    settings = {k: v for k, v in backend.items() if k not in STORE_PLACE_FIELDS}
    store_module = module_of(str(backend.get("_target_", "")))
    live = {"replay": dict(replay)} if replay is not None else {}
    return Key("trace", {"corpus_sha256": corpus_sha, "embedder": dict(embedder), "store": settings, "depth": depth,
                         "roles": list(roles) if roles else None, "warmup": warmup, **live,
                         "code": code_digest(*TRACE_CODE, *(["replay/live"] if live else []),
                                             *([store_module] if store_module else [])),
                         **({"metadata_filter": dict(metadata_filter)} if metadata_filter else {})})


def job_key(*, settings: Mapping, corpus_sha: str, embedder: Mapping) -> Key:
    """What decides a job's results: its settings (resolved config without paths and report-time
    settings), the corpus content, the embedder's identity and the whole package's code."""
    return Key("job", {"settings": dict(settings), "corpus_sha256": corpus_sha, "embedder": dict(embedder),
                       "code": code_digest("*")})


# --- unique names -------------------------------------------------------------------------------

_TOKEN: dict[int, str] = {}


def process_token() -> str:
    """A name unique to this process (pid + random), for collections and embedded store paths."""
    pid = os.getpid()
    if pid not in _TOKEN:  # keyed by pid: a forked child gets its own
        _TOKEN[pid] = f"{pid}x{secrets.token_hex(3)}"
    return _TOKEN[pid]


def new_run_id() -> str:
    """A fresh run id for this command (inherited by its worker processes)."""
    os.environ[RUN_ID_ENV] = secrets.token_hex(3)
    return os.environ[RUN_ID_ENV]


def run_id() -> str:
    """This command's run id: the suffix that keeps two runs started in the same second apart."""
    return os.environ.get(RUN_ID_ENV) or new_run_id()


OWNER_LOCK_SUFFIX = ".lock"  # <path>/proc-<token>.lock beside <path>/proc-<token>/: held (flock) by the owner
_OWNED: dict[str, int] = {}  # store directories this process created -> the open fd that holds their lock


def private_store_dir(path: str | os.PathLike) -> Path:
    """This process's own directory under a store's configured ``path``, created, and owned until the process ends.

    Ownership is an exclusive ``fcntl.flock`` on ``proc-<token>.lock`` beside the directory, held on a
    descriptor this process keeps open (and its forked children inherit): the kernel drops it only when
    the whole process family is gone, whatever PID namespace it runs in. The lock file is locked before
    it gets its name, and the directory is made after it, so no one ever sees an owned directory unlocked.
    """
    import fcntl

    d = Path(path) / f"proc-{process_token()}"
    if str(d) in _OWNED and d.is_dir():
        return d
    d.parent.mkdir(parents=True, exist_ok=True)
    lock = d.with_name(d.name + OWNER_LOCK_SUFFIX)
    fd, tmp = tempfile.mkstemp(prefix=f".{d.name}.", suffix=".tmp", dir=d.parent)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file no one else can know of yet: never blocks
        os.replace(tmp, lock)  # the name appears already locked
        d.mkdir(exist_ok=True)
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    old = _OWNED.pop(str(d), None)
    if old is not None:
        os.close(old)
    _OWNED[str(d)] = fd
    return d


def remove_stale_store_dirs(root: str | os.PathLike) -> int:
    """Delete the ``<root>/*/proc-<token>`` store directories whose owner lock can be taken (their process family
    has ended; see ``private_store_dir``). Returns how many.

    Never by PID: a run in another PID namespace (a container on the same host) has PIDs this one cannot
    see, and its live directories must stay. A directory without its lock file (written by an older
    version, or by hand) is left alone: nothing proves it is stale."""
    import fcntl

    removed, unowned = 0, []
    for lock in sorted(Path(root).glob(f"*/proc-*x*{OWNER_LOCK_SUFFIX}")):
        d = lock.with_name(lock.name[: -len(OWNER_LOCK_SUFFIX)])
        if str(d) in _OWNED:
            continue
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:  # another cleaner got there first
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its owner (any PID namespace) holds it: alive
            if not os.path.samestat(os.fstat(fd), os.stat(lock)):
                continue  # removed and made again since we opened it
            shutil.rmtree(d, ignore_errors=True)
            if not d.exists():
                lock.unlink(missing_ok=True)
                removed += 1
        except FileNotFoundError:
            continue
        finally:
            os.close(fd)
    for d in Path(root).glob("*/proc-*x*"):
        if d.is_dir() and not d.with_name(d.name + OWNER_LOCK_SUFFIX).exists():
            unowned.append(d)
    if unowned:
        log.info("left %d store director%s without an owner lock (older version, or in use): %s; delete by hand when no run "
                 "uses them", len(unowned), "y" if len(unowned) == 1 else "ies", ", ".join(str(d) for d in unowned[:3]))
    return removed


# --- cached jobs --------------------------------------------------------------------------------

def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST and not p.name.startswith("."))


def save_job(out_dir: Path, cache_dir: Path, key: Key, *, exclude: Iterable[str] = ()) -> Path:
    """Copy a finished job's files into ``cache_dir/<key>`` with a manifest of their sha256 (atomic)."""
    skip = set(exclude)
    done = Path(cache_dir) / key.digest
    done.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key.digest}.", dir=done.parent))
    try:
        files = {}
        for p in _files(out_dir):
            rel = p.relative_to(out_dir).as_posix()
            if rel in skip or p.suffix in (".log", ".tmp"):
                continue
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, tmp / rel)
            files[rel] = sha256_file(tmp / rel)
        (tmp / MANIFEST).write_text(json.dumps({**key.describe(), "files": files}, indent=2, default=str))
        _swap_in(tmp, done)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return done


def _swap_in(tmp: Path, done: Path) -> None:
    """Rename the complete entry ``tmp`` to ``done``, replacing what is there once. Only complete entries are ever
    renamed to ``done``, so when another process puts its own there between our two renames (two runs finishing the
    same job at once), that one is kept and ours dropped: one complete entry, never an error."""
    old = Path(tempfile.mkdtemp(prefix=f".{done.name}.old.", dir=done.parent))
    try:
        try:
            os.replace(done, old / "entry")  # aside: a rename onto a non-empty directory fails
        except FileNotFoundError:
            pass
        try:
            os.rename(tmp, done)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not (done / MANIFEST).is_file():
                raise
            log.debug("job cache %s was written by another process meanwhile; keeping that one", done)
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        shutil.rmtree(old, ignore_errors=True)


def check_job(done: Path, key: Key, *, required: Iterable[str] = ()) -> str:
    """'' when ``done`` holds a complete, unaltered cached job for ``key`` (with every file in ``required``,
    ``bench.results.rundir.RESULTS`` for a sweep job); else what is wrong."""
    manifest = Path(done) / MANIFEST
    if not manifest.is_file():
        return "no manifest"
    try:
        m = json.loads(manifest.read_text())
    except (OSError, ValueError) as e:
        return f"manifest unreadable ({type(e).__name__})"
    if m.get("key") != key.digest:
        return "manifest is for another key"
    files = m.get("files") or {}
    for rel in required:
        if rel not in files:
            return f"{rel} missing from the manifest"
    for rel, want in files.items():
        p = Path(done) / rel
        try:
            if sha256_file(p) != want:
                return f"{rel} changed since it was cached (sha256 mismatch)"
        except (FileNotFoundError, IsADirectoryError):  # also: replaced by another process's save_job meanwhile
            return f"{rel} missing"
    extra = sorted(set(p.relative_to(done).as_posix() for p in _files(Path(done))) - set(files))
    if extra:
        return f"unexpected file {extra[0]}"
    return ""


def restore_job(done: Path, out_dir: Path) -> None:
    """Copy a checked cached job into ``out_dir`` (not its manifest)."""
    shutil.copytree(done, out_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns(MANIFEST))


# --- reports/latest -----------------------------------------------------------------------------

def publish_latest(run_dir: Path, latest: Path) -> None:
    """Point ``latest`` at the finished ``run_dir``: a relative symlink swapped in by one rename, so
    ``latest`` is always a complete run (an old real directory named ``latest`` is replaced too)."""
    run_dir, latest = Path(run_dir).resolve(), Path(latest)
    latest.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(run_dir, latest.parent.resolve())
    tmp = latest.with_name(f".{latest.name}.{process_token()}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp, target_is_directory=True)
    try:
        if latest.is_dir() and not latest.is_symlink():  # a copy written by an older version
            old = latest.with_name(f".{latest.name}.old.{process_token()}")
            os.replace(latest, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, latest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
