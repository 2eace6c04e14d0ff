"""``make ray`` (``recallbench ray``): a multirun on a Ray cluster, through ``hydra/launcher=ray`` (hydra-ray-launcher).

With no ``--address``: when nothing answers on 127.0.0.1:``--port``, a local head is started with
``ray start --head --block --node-ip-address=127.0.0.1 --port=PORT --num-cpus=2 --include-dashboard=false``
(2 CPUs = two worker processes, one job each), the multirun runs on it, and the head is stopped
again: SIGTERM to the ``ray start`` process this tool started (it stops the processes it started);
any of them still alive after 60 s is killed by its process id. A head that was already running is
used and left running. With ``--address`` (a real cluster) nothing is started or stopped.

What binds where (Ray 2.60, measured here): the GCS (``--port``), the raylet, the object manager and
the dashboard agent listen on every interface (Ray binds its gRPC servers to 0.0.0.0/``*`` and turns
127.0.0.1 into the node's address: ``--node-ip-address`` only decides what it advertises); the Ray
client server (10001) and the agent's HTTP port listen on loopback and the node address. The
dashboard (8265) is not started. So the head is reachable from the network for as long as the run
lasts: run it on a trusted host, or set ``RAY_AUTH_MODE=token`` (Ray then keeps a token in
``~/.ray/auth_token``; a secret: never copy it into configs or reports).

The multirun is ``python -m bench -m hydra/launcher=ray hydra.launcher.ray.init.address=<address>
paths.root=<cwd> <overrides>`` (default overrides: ``RAY_DEFAULT``); ``paths.root`` is passed so that
workers, whose working directory is Ray's, write under this directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.cli.common import entry, parser, setup_logging, work_dir

log = logging.getLogger("bench.tools.ray_run")

PORT = 6391  # the GCS port of a head started here (not Ray's default 6379: leaves a default cluster alone)
NUM_CPUS = 2
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
RAY_DEFAULT = ("dataset=locomo_ci", "backend=exact,sqlite_vec", "embedder=minilm", "strategy=[limit,threshold,hybrid]",
               "progress=false")


def ray_binary() -> str:
    """The ``ray`` command of this environment; one line naming the extra when it is missing."""
    exe = Path(sys.executable).with_name("ray")
    try:
        import hydra_plugins.hydra_ray_launcher  # noqa: F401
        import ray  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"Ray is not installed ({exc.name}): pip install 'recallbench[ray]'") from None
    return str(exe) if exe.exists() else "ray"


def answers(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True when something accepts a TCP connection on host:port."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout_s):
        return True
    return False


def _descendants(pid: int) -> list[int]:
    """Process ids under ``pid`` (Linux /proc), deepest last."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        for f in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                kids += [int(x) for x in f.read_text().split()]
        out += kids
        todo += kids
    return out


@contextlib.contextmanager
def local_head(port: int = PORT, *, num_cpus: int = NUM_CPUS, log_file: Path | None = None) -> Iterator[tuple[str, bool]]:
    """(address, started_here): a Ray head on 127.0.0.1:``port``, started (and stopped on leaving) when none answers."""
    address = f"127.0.0.1:{port}"
    if answers("127.0.0.1", port):
        log.info("a Ray cluster already answers at %s: using it, leaving it running", address)
        yield address, False
        return
    cmd = [ray_binary(), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
           f"--num-cpus={num_cpus}", "--include-dashboard=false", "--disable-usage-stats"]
    code = str(Path(__file__).resolve().parents[2])  # the workers import the same recallbench as this process
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")])))
    out = open(log_file, "w") if log_file else subprocess.DEVNULL  # noqa: SIM115 (kept open for the head's life)
    log.info("starting a Ray head: %s", " ".join(cmd[1:]))
    head = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        status = [cmd[0], "status", f"--address={address}"]
        while subprocess.run(status, capture_output=True, env=env, check=False).returncode != 0:
            if head.poll() is not None:
                raise RuntimeError(f"ray start exited with {head.returncode} (log: {log_file})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Ray head at {address} did not come up within {START_TIMEOUT_S:.0f} s (log: {log_file})")
            time.sleep(1.0)
        log.info("Ray head up at %s (pid %d, %d CPUs)", address, head.pid, num_cpus)
        yield address, True
    finally:
        stop_head(head)
        if log_file:
            out.close()


def stop_head(head: subprocess.Popen) -> None:
    """SIGTERM to the ``ray start --block`` process (it stops what it started); leftovers killed by their ids."""
    started = _descendants(head.pid)
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
    left = [p for p in started if Path(f"/proc/{p}").exists() and "zombie" not in _state(p)]
    for p in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    log.info("Ray head stopped (%d of its %d processes needed a SIGKILL)", len(left), len(started))


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0].lower()
    except (OSError, IndexError):
        return "zombie"


def multirun_cmd(address: str | None, overrides: Sequence[str], *, launcher: str = "ray", root: Path | None = None) -> list[str]:
    """The sweep command of one multirun under ``launcher`` (ray: on ``address``; joblib: local processes), writing under
    ``root`` (default: the current directory)."""
    cmd = [sys.executable, "-m", "bench", "-m", f"hydra/launcher={launcher}", f"paths.root={root or work_dir()}"]
    if launcher == "ray":
        # A Ray worker resolves the job's config itself, in an environment of its own: ${now:} and ${rb.run_id:}
        # would name another sweep directory per job. The directory is fixed here, once, for the driver and the jobs.
        stamp = f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{secrets.token_hex(3)}"
        cmd += [f"hydra.launcher.ray.init.address={address}", f"hydra.sweep.dir='${{paths.reports}}/runs/{stamp}'"]
    return cmd + list(overrides)


def main(argv: list[str] | None = None) -> int:
    ap = parser("ray", "A multirun on a Ray cluster (hydra/launcher=ray); a local head on loopback is started and stopped when none runs.",
                examples=["recallbench ray                                   # LoCoMo CI subset: exact,sqlite_vec x minilm",
                          "recallbench ray -- dataset=locomo backend=exact,sqlite_vec,seekdb",
                          "recallbench ray --address 10.0.0.5:6379 -- backend=seekdb_server ...   # a real cluster"])
    ap.add_argument("--port", type=int, default=PORT, help=f"GCS port of the local head (default {PORT})")
    ap.add_argument("--address", default=None, help="an existing cluster's address (nothing is started or stopped)")
    ap.add_argument("--num-cpus", type=int, default=NUM_CPUS, help="CPUs of a local head (= jobs at once)")
    ap.add_argument("overrides", nargs="*", help=f"sweep overrides (default: {' '.join(RAY_DEFAULT)})")
    args = ap.parse_args(argv)
    setup_logging()
    ray_binary()
    overrides = args.overrides or list(RAY_DEFAULT)
    with contextlib.ExitStack() as stack:
        address = args.address
        if address is None:
            logs = work_dir() / "reports" / "ray"
            logs.mkdir(parents=True, exist_ok=True)
            address, _ = stack.enter_context(local_head(args.port, num_cpus=args.num_cpus, log_file=logs / "head.log"))
        cmd = multirun_cmd(address, overrides)
        log.info("multirun: %s", " ".join(cmd[2:]))
        return subprocess.run(cmd, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(entry(main))
