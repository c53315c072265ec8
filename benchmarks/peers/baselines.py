"""quorumlog itself and the ceiling, each run as a subprocess with a bounded wait.

quorumlog's figures are `quorumlog bench --local 3 ... --json`: the same client conventions the peers
follow. The ceiling is the bare replicated-log prototype in shared/bench/ceiling (fixed leader, no
election, no index, fdatasync in a thread), run with its own canonical settings: one connection, 8
requests of 256 entries in flight (or, for benchmarks/single_bench.py, one entry at a time). It listens on its own
fixed ports 7100-7102.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import stop_procs

REPO = Path(__file__).resolve().parents[2]
CEILING_DIR = REPO.parent / "shared" / "bench" / "ceiling"
CEILING_PYTHON = Path("/tmp/ceil/bin/python")


def _run_bounded(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> str:
    """stdout of `cmd`, which runs in its own process group. On timeout or Ctrl-C the group gets SIGINT
    first (a bench then stops the cluster it started and removes its dir), then SIGTERM and SIGKILL after
    a bounded wait."""
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException as e:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.communicate(timeout=20)
        if isinstance(e, subprocess.TimeoutExpired):
            raise TimeoutError(f"{' '.join(cmd[:4])}… did not finish within {timeout:.0f} s") from None
        raise
    finally:
        stop_procs([p], timeout=5.0, group=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}… exited with {p.returncode}: {err.strip()[-500:]}")
    return out


def quorumlog_cmd(size: int, seconds: float, connections: int, inflight: int, batch: int, single: int,
                  replication: str = "raft") -> list[str]:
    cmd = [sys.executable, "-m", "quorumlog", "bench", "--local", "3", "--size", str(size), "--seconds",
           f"{seconds:g}", "--connections", str(connections), "--inflight", str(inflight), "--batch", str(batch),
           "--single", str(single), "--failovers", "0", "--json"]
    if replication == "primary-backup":
        cmd += ["--replication", "primary-backup", "--ack", "sync"]
    return cmd


def run_quorumlog(size: int, seconds: float, connections: int, inflight: int, batch: int, single: int,
                  replication: str = "raft") -> dict[str, Any]:
    """One `quorumlog bench --local 3` run (fresh cluster, flush sync, its own temp dir)."""
    cmd = quorumlog_cmd(size, seconds, connections, inflight, batch, single, replication)
    out = _run_bounded(cmd, timeout=120 + 3 * seconds + single * 0.05)
    result: dict[str, Any] = json.loads(out)
    result["command"] = " ".join(["quorumlog"] + cmd[3:])
    return result


def ceiling_available(directory: Path, python: Path) -> str | None:
    """None when the ceiling can run, else why not."""
    if not (directory / "spike_bench.py").is_file():
        return f"no {directory / 'spike_bench.py'}"
    if not python.is_file():
        return f"no {python} (python3 -m venv /tmp/ceil && /tmp/ceil/bin/pip install uvloop)"
    return None


def run_ceiling(size: int, seconds: float, directory: Path = CEILING_DIR, python: Path = CEILING_PYTHON, *,
                batch: int = 256, inflight: int = 8) -> dict[str, Any]:
    """One spike_bench run in a temp SPIKE_DIR (removed afterwards): entries/s and request latency. With
    batch=1, inflight=1 that is one append at a time, and p50_ms/p99_ms are per-append latencies."""
    name = "c1" if batch == inflight == 1 else "c1k" if size >= 1024 else f"c{size}"
    args = [name, f"body={size}", f"batch={batch}", f"inflight={inflight}", "store=write", "prezero=1",
            "size=536870912", f"duration={max(1, round(seconds))}"]
    run_dir = tempfile.mkdtemp(prefix="peers-ceiling-")
    try:
        env = dict(os.environ, SPIKE_DIR=run_dir)
        out = _run_bounded([str(python), str(directory / "spike_bench.py"), *args], timeout=180 + 2 * seconds,
                           env=env)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    row["command"] = f"SPIKE_DIR=DIR {python} {directory / 'spike_bench.py'} " + " ".join(args)
    return row
