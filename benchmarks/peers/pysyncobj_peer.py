"""PySyncObj as a peer: 3 processes on 127.0.0.1, each a SyncObj whose @replicated method counts the
entries and bytes appended (the bodies themselves stay in PySyncObj's journal).

PySyncObj has no network client protocol: a replicated method is called inside a member's process. So the
load generator runs in the leader's process, calling the method with a callback, one body per command,
with a bounded number of commands in flight. The caller pickles each command, as PySyncObj does.

Batching is PySyncObj's own: with `appendEntriesUseBatch` on (its default) the leader gathers the
commands queued since its last send into one AppendEntries message every `appendEntriesPeriod` (0.1 s).
The "batched" phase therefore keeps C*K*B commands in flight (as many entries as the others' C*K requests
of B entries) on a cluster with the defaults. The "unbatched" phase keeps C*K commands in flight, and the
one-at-a-time latency phase one, on a second cluster with `appendEntriesUseBatch` off, the setting
PySyncObj documents for the shortest request time (with it on, each command waits for the next 0.1 s
send: 32 in flight gave about 300/s).

Durability: each member uses PySyncObj's file journal (`journalFile`, with `fullDumpFile` for its log
compaction). PySyncObj writes the journal through mmap and never fsyncs or msyncs it, and offers no option
to: **these figures are without fsync**, against etcd's and quorumlog's synced writes.

    python pysyncobj_peer.py node --self HOST:PORT --partners A,B --dir DIR --phases JSON [--no-batch-append]
runs one member (the driver starts three); `run()` is the driver side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import free_ports, lat_summary, rate_row, read_json_line, stop_procs


def _make_log_class() -> type:
    # pysyncobj is imported only in member processes: the driver needs none of it.
    from pysyncobj import SyncObj, replicated

    class Log(SyncObj):
        def __init__(self, self_addr: str, partners: list[str], conf: Any) -> None:
            super().__init__(self_addr, partners, conf)
            self.entries = 0
            self.nbytes = 0

        @replicated
        def append(self, body: bytes) -> int:
            self.entries += 1
            self.nbytes += len(body)
            return self.entries

    return Log


def _throughput(obj: Any, size: int, seconds: float, inflight: int) -> dict[str, Any]:
    """`inflight` commands of one body outstanding for `seconds`; those answered later are not counted."""
    from pysyncobj import FAIL_REASON

    body = os.urandom(size)
    slots = threading.BoundedSemaphore(inflight)
    lat: list[float] = []
    done = [0]
    errors: list[int] = []
    t0 = time.perf_counter()
    stop_at = t0 + seconds

    def call() -> None:
        t = time.perf_counter()

        def cb(_result: Any, err: int) -> None:
            now = time.perf_counter()
            if err != FAIL_REASON.SUCCESS:
                errors.append(err)
            elif now <= stop_at:
                lat.append(now - t)
                done[0] += 1
            slots.release()

        obj.append(body, callback=cb)

    while time.perf_counter() < stop_at:
        if slots.acquire(timeout=0.1):
            call()
    drained = 0
    deadline = time.monotonic() + 10  # let the commands in flight finish, bounded
    while drained < inflight and slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
        drained += 1
    return rate_row(done[0], seconds, size, lat, inflight=inflight, errors=len(errors),
                    unfinished=inflight - drained)


def _single(obj: Any, size: int, count: int, max_seconds: float) -> dict[str, Any]:
    body = os.urandom(size)
    obj.append(body, sync=True, timeout=10)
    lat: list[float] = []
    deadline = time.monotonic() + max_seconds
    while len(lat) < count and time.monotonic() < deadline:
        t = time.perf_counter()
        obj.append(body, sync=True, timeout=10)
        lat.append(time.perf_counter() - t)
    return {"appends": len(lat)} | lat_summary(lat)


def node_main(argv: list[str]) -> int:
    """One member. The member that is leader once the cluster is ready runs the phases and prints their
    results as one JSON line; the others serve until stopped (or until --max-life runs out)."""
    from pysyncobj import SyncObjConf

    p = argparse.ArgumentParser()
    p.add_argument("--self", dest="self_addr", required=True)
    p.add_argument("--partners", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--phases", required=True, help="JSON: phase, size, seconds, inflight, single")
    p.add_argument("--no-batch-append", action="store_true")
    p.add_argument("--max-life", type=float, default=600.0)
    a = p.parse_args(argv)
    spec = json.loads(a.phases)
    born = time.monotonic()
    conf = SyncObjConf(journalFile=os.path.join(a.dir, "journal"), fullDumpFile=os.path.join(a.dir, "dump"),
                       appendEntriesUseBatch=not a.no_batch_append)
    obj = _make_log_class()(a.self_addr, a.partners.split(","), conf)
    deadline = time.monotonic() + 30
    while not (obj._isReady() and obj._getLeader() is not None):
        if time.monotonic() > deadline:
            print(json.dumps({"error": "no leader after 30 s"}), flush=True)
            return 1
        time.sleep(0.05)
    if obj._isLeader():
        size, seconds, inflight = spec["size"], spec["seconds"], spec["inflight"]
        out: dict[str, Any] = {"leader": a.self_addr}
        obj.append(b"warm-up", sync=True, timeout=10)
        if spec.get("phase"):
            out[spec["phase"]] = _throughput(obj, size, seconds, inflight)
        if spec.get("single"):
            out["single"] = _single(obj, size, spec["single"], max(10.0, 3 * seconds))
        print(json.dumps(out), flush=True)
    while time.monotonic() - born < a.max_life:  # serve the others until the driver stops us
        time.sleep(0.2)
    return 0


def _cluster(root: Path, spec: dict[str, Any], batch_append: bool, timeout: float) -> dict[str, Any]:
    """Start 3 members, wait (bounded) for the leader's results, stop every member by its pid."""
    ports = free_ports(3)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    procs: list[subprocess.Popen[str]] = []
    try:
        for i, addr in enumerate(addrs):
            d = root / f"m{i}"
            d.mkdir()
            cmd = [sys.executable, __file__, "node", "--self", addr,
                   "--partners", ",".join(x for x in addrs if x != addr), "--dir", str(d),
                   "--phases", json.dumps(spec), "--max-life", str(timeout + 30)]
            if not batch_append:
                cmd.append("--no-batch-append")
            with open(d / "stderr.log", "w") as err:
                procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                              stderr=err, text=True))
        assert all(p.stdout is not None for p in procs)
        got = read_json_line({p.stdout: addr for p, addr in zip(procs, addrs, strict=True) if p.stdout}, timeout)
        if got is None:
            raise TimeoutError(f"no PySyncObj member reported within {timeout:.0f} s (logs: {root})")
        result: dict[str, Any] = json.loads(got[1])
        if "error" in result:
            raise RuntimeError(f"PySyncObj member {got[0]}: {result['error']}")
        return result
    finally:
        stop_procs(procs, timeout=5.0)


def pysyncobj_version() -> str:
    from importlib.metadata import version

    return version("pysyncobj")


def run(size: int, seconds: float, connections: int, inflight: int, batch: int,
        single_count: int) -> dict[str, Any]:
    """The batched phase on a cluster with PySyncObj's defaults, then the unbatched and one-at-a-time phases
    on a second cluster with `appendEntriesUseBatch` off; temp dirs removed whatever happens."""
    root = Path(tempfile.mkdtemp(prefix="peers-pysyncobj-"))
    try:
        out: dict[str, Any] = {"system": "PySyncObj", "version": pysyncobj_version(), "size": size,
                               "durability": "file journal written through mmap, never fsynced (no option)"}
        (root / "batched").mkdir()
        spec = {"phase": "batched", "size": size, "seconds": seconds, "inflight": connections * inflight * batch}
        got = _cluster(root / "batched", spec, batch_append=True, timeout=60 + 2 * seconds)
        out["batched"] = got["batched"] | {"appendEntriesUseBatch": True, "batch": batch,
                                           "label": f"{spec['inflight']:,} commands in flight"}
        (root / "unbatched").mkdir()
        spec = {"phase": "unbatched", "size": size, "seconds": seconds, "inflight": connections * inflight,
                "single": single_count}
        got = _cluster(root / "unbatched", spec, batch_append=False, timeout=60 + 5 * seconds)
        out["unbatched"] = got["unbatched"] | {"appendEntriesUseBatch": False, "batch": 1,
                                               "label": f"{spec['inflight']} commands in flight"}
        if "single" in got:
            out["single"] = got["single"] | {"appendEntriesUseBatch": False}
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["node"]:
        sys.exit(node_main(sys.argv[2:]))
    sys.exit("usage: pysyncobj_peer.py node ... (run.py starts the members)")
