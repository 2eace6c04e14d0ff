"""`make data`: verify the external corpora against datasets/manifests/*.json and download missing files.

Owns the manifest format (read + validated here), file verification (size, then sha256), and the
atomic download (temp file in the target folder, hash checked, then ``os.replace``: a failed or
interrupted download never leaves a partial file under the real name).

CLI::

    recallbench data fetch [--data-dir DIR] [--manifests DIR] [--only NAME ...] [--offline] [--timeout S]

The data dir defaults to env ``BENCH_DATA_DIR``, else ``datasets/`` under the current directory
(the same rule as config ``paths.datasets``). Exit codes: 0 every file present and verified,
1 a present file (or a downloaded one) does not match its manifest, 3 files are missing and could
not be downloaded (no network, ``--offline``, HTTP error). 2 is argparse's usage error.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bench.output import file_mode
from bench.resources import manifests_dir

log = logging.getLogger(__name__)

MANIFEST_DIR = manifests_dir()
TIMEOUT_S = 20.0
EXIT_OK, EXIT_MISMATCH, EXIT_MISSING = 0, 1, 3
_CHUNK = 1 << 20
_SHOW_MISSING = 3  # per manifest; the rest are summarised in one line


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str  # POSIX path relative to the manifest's target folder
    size: int
    sha256: str
    urls: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Manifest:
    name: str
    target: str  # folder under the data dir
    files: tuple[FileEntry, ...]
    licence: str
    non_commercial: bool
    tree_sha256: str
    citation: str = ""
    source: str = ""  # the manifest file it was read from


@dataclass(frozen=True, slots=True)
class FileStatus:
    manifest: str
    entry: FileEntry
    dest: Path
    state: str  # "ok" | "downloaded" | "mismatch" | "missing"
    detail: str = ""


class DownloadFailed(OSError):
    """The transfer failed (DNS, refused, timeout, reset, truncated body, HTTP error status).

    ``server_answered`` is True for an HTTP error status: the network works, only that URL failed.
    """

    def __init__(self, message: str, *, server_answered: bool = False) -> None:
        super().__init__(message)
        self.server_answered = server_answered


def default_data_dir() -> Path:
    return Path(os.environ.get("BENCH_DATA_DIR") or "datasets").resolve()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def tree_sha256(pairs) -> str:
    """sha256 over the sha256sum-style lines ``"<sha256>  <path>\\n"`` of (path, sha256) pairs, sorted by path.

    Same as ``cd <target> && LC_ALL=C sha256sum <paths...> | sha256sum`` with the paths in byte order.
    """
    lines = "".join(f"{sha}  {path}\n" for path, sha in sorted(pairs, key=lambda p: p[0].encode()))
    return hashlib.sha256(lines.encode()).hexdigest()


def _is_sha256(v) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


def _safe_relpath(v) -> bool:
    if not isinstance(v, str) or not v or "\\" in v:
        return False
    p = PurePosixPath(v)
    return not p.is_absolute() and ".." not in p.parts and "." not in p.parts


def load_manifest(path: str | os.PathLike) -> Manifest:
    """Read and validate one manifest; any problem raises ValueError naming the file and field."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: malformed JSON (column {e.colno}): {e.msg}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not valid UTF-8 (byte offset {e.start})") from None

    def bad(field: str, why: str) -> ValueError:
        return ValueError(f"{path}: field {field!r}: {why}")

    if not isinstance(data, dict):
        raise bad("<top>", f"expected a JSON object, got {type(data).__name__}")
    for key in ("name", "target", "licence"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise bad(key, f"required non-empty string, got {data.get(key)!r}")
    if data["name"] != path.stem:
        raise bad("name", f"must equal the file name {path.stem!r}, got {data['name']!r}")
    if not _safe_relpath(data["target"]):
        raise bad("target", f"must be a relative folder without '..', got {data['target']!r}")
    if not isinstance(data.get("non_commercial"), bool):
        raise bad("non_commercial", f"required true/false, got {data.get('non_commercial')!r}")
    if not _is_sha256(data.get("tree_sha256")):
        raise bad("tree_sha256", f"required 64 lowercase hex chars, got {data.get('tree_sha256')!r}")
    raw_files = data.get("files")
    if not isinstance(raw_files, list) or not raw_files:
        raise bad("files", "required non-empty list")
    files, seen = [], set()
    for i, f in enumerate(raw_files):
        where = f"files[{i}]"
        if not isinstance(f, dict):
            raise bad(where, f"expected an object, got {type(f).__name__}")
        if not _safe_relpath(f.get("path")):
            raise bad(f"{where}.path", f"must be a relative path without '..', got {f.get('path')!r}")
        if f["path"] in seen:
            raise bad(f"{where}.path", f"duplicate path {f['path']!r}")
        seen.add(f["path"])
        size = f.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise bad(f"{where}.size", f"required integer >= 0, got {size!r}")
        if not _is_sha256(f.get("sha256")):
            raise bad(f"{where}.sha256", f"required 64 lowercase hex chars, got {f.get('sha256')!r}")
        urls = f.get("urls")
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and "://" in u for u in urls):
            raise bad(f"{where}.urls", f"required non-empty list of URLs, got {urls!r}")
        files.append(FileEntry(f["path"], size, f["sha256"], tuple(urls)))
    got = tree_sha256((f.path, f.sha256) for f in files)
    if got != data["tree_sha256"]:
        raise bad("tree_sha256", f"does not match the listed files (expected {data['tree_sha256']}, computed {got})")
    return Manifest(name=data["name"], target=data["target"], files=tuple(files), licence=data["licence"],
                    non_commercial=data["non_commercial"], tree_sha256=data["tree_sha256"],
                    citation=str(data.get("citation", "")), source=str(path))


def load_manifests(directory: str | os.PathLike = MANIFEST_DIR) -> list[Manifest]:
    """Every ``*.json`` manifest in ``directory``, sorted by file name; names must be unique."""
    directory = Path(directory)
    paths = sorted(directory.glob("*.json"))
    if not paths:
        raise ValueError(f"{directory}: no manifests (*.json) found")
    out = [load_manifest(p) for p in paths]
    names = [m.name for m in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"{directory}: manifest name(s) used twice: {', '.join(sorted(dup))}")
    return out


def check_file(entry: FileEntry, dest: Path) -> tuple[str, str]:
    """("ok" | "mismatch" | "missing", detail) for one local file; size is compared before hashing."""
    if not dest.is_file():
        return "missing", ""
    size = dest.stat().st_size
    if size != entry.size:
        return "mismatch", f"MISMATCH (expected size {entry.size}, got {size})"
    got = sha256_file(dest)
    if got != entry.sha256:
        return "mismatch", f"MISMATCH (expected sha256 {entry.sha256}, got {got})"
    return "ok", "ok"


def download(url: str, dest: Path, *, size: int, sha256: str, timeout: float = TIMEOUT_S) -> None:
    """Fetch ``url`` into ``dest`` atomically. Raises DownloadFailed when the transfer fails and ValueError
    when the bytes do not match size/sha256; in both cases nothing is left at ``dest`` or beside it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        h, n = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:
                    while chunk := resp.read(_CHUNK):
                        n += len(chunk)
                        if n > size:
                            raise ValueError(f"{url}: more than the expected {size} bytes")
                        h.update(chunk)
                        out.write(chunk)
                    short_by = resp.length  # bytes the server announced but never sent (None: unknown)
            except urllib.error.HTTPError as e:
                raise DownloadFailed(f"HTTP {e.code} {e.reason}", server_answered=True) from None
            except urllib.error.URLError as e:
                raise DownloadFailed(str(e.reason)) from None
            except (OSError, http.client.HTTPException) as e:  # timeouts, resets, truncated bodies
                raise DownloadFailed(f"{type(e).__name__}: {e}") from None
        if short_by:
            raise DownloadFailed(f"connection closed after {n} bytes, {short_by} more announced")
        if n != size:
            raise ValueError(f"{url}: expected size {size}, got {n}")
        if h.hexdigest() != sha256:
            raise ValueError(f"{url}: expected sha256 {sha256}, got {h.hexdigest()}")
        os.chmod(tmp, file_mode())  # mkstemp makes 0600; the umask decides
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fetch(data_dir: str | os.PathLike, manifests: list[Manifest], *, offline: bool = False,
          timeout: float = TIMEOUT_S) -> list[FileStatus]:
    """Verify every manifest file under ``data_dir``; download missing ones unless ``offline``.

    After the first network failure no further download is tried (the machine is taken as offline),
    so a missing 500-file corpus costs one timeout, not 500.
    """
    data_dir = Path(data_dir)
    out: list[FileStatus] = []
    net_error = "offline (--offline)" if offline else ""
    for m in manifests:
        for e in m.files:
            dest = data_dir / m.target / e.path
            state, detail = check_file(e, dest)
            if state == "missing":
                if net_error:
                    detail = net_error
                else:
                    state, detail, net_error = _try_download(e, dest, timeout)
            out.append(FileStatus(m.name, e, dest, state, detail))
    return out


def _try_download(e: FileEntry, dest: Path, timeout: float) -> tuple[str, str, str]:
    """(state, detail, network error that should stop further downloads or "")."""
    reasons, network_down = [], False
    for url in e.urls:
        log.info("downloading %s -> %s", url, dest)
        try:
            download(url, dest, size=e.size, sha256=e.sha256, timeout=timeout)
            return "downloaded", f"downloaded from {url}", ""
        except ValueError as err:
            return "mismatch", f"MISMATCH in download ({err}); nothing written", ""
        except DownloadFailed as err:
            reasons.append(f"{url}: {err}")
            network_down = network_down or not err.server_answered
        except OSError as err:  # cannot create the folder or temp file: no URL will help
            return "missing", f"cannot write into {dest.parent} ({err})", ""
    reason = "; ".join(reasons)
    stop = f"not tried after an earlier network failure ({reason})" if network_down else ""
    return "missing", f"download failed ({reason})", stop


def exit_code(statuses: list[FileStatus]) -> int:
    states = {s.state for s in statuses}
    if "mismatch" in states:
        return EXIT_MISMATCH
    if "missing" in states:
        return EXIT_MISSING
    return EXIT_OK


def report_lines(statuses: list[FileStatus], manifests: list[Manifest], data_dir: str | os.PathLike) -> list[str]:
    """Human report: every mismatch, the first few missing files per manifest, one summary line each."""
    lines = []
    for m in manifests:
        mine = [s for s in statuses if s.manifest == m.name]
        if not mine:
            continue
        missing = [s for s in mine if s.state == "missing"]
        for s in mine:
            if s.state == "mismatch":
                lines.append(f"{m.name}: {s.dest}: {s.detail}")
        for s in missing[:_SHOW_MISSING]:
            lines.append(f"{m.name}: MISSING {s.dest} ({s.entry.size} bytes, sha256 {s.entry.sha256}): {s.detail}. "
                         f"Get it from {s.entry.urls[0]} and put it at {s.dest}")
        if len(missing) > _SHOW_MISSING:
            lines.append(f"{m.name}: ... and {len(missing) - _SHOW_MISSING} more missing files under "
                         f"{missing[0].dest.parent}; their URLs are listed in {m.source}")
        counts = {k: sum(s.state == k for s in mine) for k in ("ok", "downloaded", "mismatch", "missing")}
        summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        nc = "; NON-COMMERCIAL use only" if m.non_commercial else ""
        lines.append(f"{m.name}: {len(mine)} file(s) in {Path(data_dir) / m.target}: {summary} "
                     f"(licence {m.licence}{nc})")
    return lines
