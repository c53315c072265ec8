"""Failover of a primary/backup group under a controller: SIGKILL the primary while a writer appends,
time until the first append the new primary acknowledges, then check that no acknowledged append was lost.

    .venv/bin/python benchmarks/failover_bench.py [--rounds 5] [--size 100] [--keep]

A 3-node local cluster (in a temp dir) hosts g0, a primary/backup group with ack "sync" and controller
"ctl", and ctl, the Raft group that records g0's epoch, primary and in-sync set and promotes an in-sync
backup once the primary has been silent for failover_timeout_ms (docs/replication.md). One writer thread
appends bodies one at a time through a `Client` (the idempotent producer, retrying across the failover).

Each round waits until every node runs and the primary's recorded in-sync set holds both backups, then
SIGKILLs the primary. Failover time is from the signal to the first acknowledgement the writer receives
after the killed process is known to be gone (so the new primary sent it). The killed node is restarted
before the next round: it finds a newer epoch in the record, follows the new primary and is cut back to
where the two logs agree. The controller's own Raft group runs on the same three nodes, so a round whose
kill also takes the controller leader adds a controller election to the failover: each round says which.

At the end every committed entry is read back: each acknowledged body must be there exactly once; a body
whose append failed (it raised after the client's retries) may be there at most once. The script prints
figures and exits 1 only when that check fails; it asserts nothing about time. The cluster is stopped (by
the pids LocalCluster started) and its directory removed even when the run fails.
"""

from __future__ import annotations

import argparse
import bisect
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorumlog.client import Client
from quorumlog.errors import QuorumLogError
from quorumlog.server.cluster import LocalCluster

GROUP = "g0"
CONTROLLER = "ctl"
# 64 MiB segments: a fresh node zero-fills its first segment and a spare of each group before it is quiet.
STORE = {"data_segment_bytes": 64 << 20, "index_segment_bytes": 32 * ((64 << 20) // 200)}


@dataclass
class Writer:
    """Appends unique bodies one at a time; remembers what was acknowledged, when, and what failed."""

    endpoints: str
    size: int
    acked: dict[bytes, tuple[int, int, float]] = field(default_factory=dict)  # body -> (index, term, at)
    failed: dict[bytes, str] = field(default_factory=dict)  # body -> error (the append may or may not be in)
    stop: threading.Event = field(default_factory=threading.Event)
    ack_times: list[float] = field(default_factory=list)
    error: BaseException | None = None

    def run(self) -> None:
        try:
            with Client(self.endpoints, GROUP, retry_timeout=30.0) as c:
                seq = 0
                while not self.stop.is_set():
                    body = f"w{seq:09d}-".encode().ljust(self.size, b".")
                    seq += 1
                    try:
                        r = c.append(body)
                    except QuorumLogError as e:
                        self.failed[body] = f"{type(e).__name__}: {e}"
                        continue
                    at = time.monotonic()
                    self.acked[body] = (r.index, r.term, at)
                    self.ack_times.append(at)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e

    def first_ack_after(self, t: float, timeout: float) -> float | None:
        """When the first acknowledgement later than `t` arrived (waiting up to `timeout` for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            times = self.ack_times  # appended in time order by the writer thread
            k = bisect.bisect_right(times, t)
            if k < len(times):
                return times[k]
            if self.error is not None:
                return None
            time.sleep(0.001)
        return None


def group_status(admin: Client, cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    """g0's status document of every node that answers."""
    out = {}
    for node in cluster.nodes:
        if not node.alive:
            continue
        try:
            out[node.node_id] = admin.node_status(node.address)["groups"][GROUP]
        except (QuorumLogError, OSError, KeyError):
            continue
    return out


def wait_healthy(admin: Client, cluster: LocalCluster, timeout: float) -> tuple[str, int] | None:
    """Wait until all nodes answer, one confirmed primary leads them all and its recorded in-sync set
    holds every backup: (primary, epoch), or None after `timeout`."""
    deadline = time.monotonic() + timeout
    ids = {n.node_id for n in cluster.nodes}
    while time.monotonic() < deadline:
        docs = group_status(admin, cluster)
        primaries = [n for n, d in docs.items() if d.get("role") == "leader" and d.get("confirmed")]
        if len(docs) == len(ids) and len(primaries) == 1:
            p = primaries[0]
            d = docs[p]
            if set(d.get("in_sync", [])) == ids - {p} and all(x.get("primary") == p for x in docs.values()):
                return p, int(d["epoch"])
        time.sleep(0.1)
    return None


def controller_leader(admin_ctl: Client) -> str | None:
    try:
        return admin_ctl.metadata(with_nodes=False).leader
    except QuorumLogError:
        return None


def verify(admin: Client, writer: Writer) -> tuple[bool, list[str]]:
    """Read every committed entry back; each acknowledged body exactly once, a failed one at most once."""
    md = admin.metadata(with_nodes=True)
    live = [d for d in md.nodes.values() if d is not None]
    committed = max(int(d["committed_index"]) for d in live)
    begin = min(int(d["begin_index"]) for d in live)
    seen: Counter[bytes] = Counter()
    for e in admin.read(begin, committed - begin + 1):
        seen[e.body] += 1
    lost = [b for b in writer.acked if seen[b] == 0]
    twice = [b for b in writer.acked if seen[b] > 1]
    failed_twice = [b for b in writer.failed if seen[b] > 1]
    failed_in = sum(1 for b in writer.failed if seen[b] == 1)
    lines = [f"read back indexes {begin}..{committed}: {sum(seen.values()):,} entries",
             f"acknowledged appends: {len(writer.acked):,}; lost {len(lost)}, written twice {len(twice)}",
             f"failed appends (raised after retries): {len(writer.failed)}; of them in the log {failed_in}, "
             f"twice {len(failed_twice)}"]
    for b in (lost + twice + failed_twice)[:10]:
        lines.append(f"  {b[:16]!r}: ack {writer.acked.get(b)}, in the log {seen[b]} times")
    for b, err in list(writer.failed.items())[:5]:
        lines.append(f"  failed {b[:16]!r}: {err}")
    return not lost and not twice and not failed_twice, lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="primary kills (default 5)")
    ap.add_argument("--size", type=int, default=100, help="body bytes per append (default 100)")
    ap.add_argument("--warm", type=float, default=1.0, help="seconds of writing before each kill (default 1)")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (its path is printed)")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="quorumlog-failover-"))
    cluster = LocalCluster(root, 3, 1, replication="primary-backup", ha={"ack": "sync", "controller": CONTROLLER},
                           store=STORE)
    writer = Writer(cluster.endpoints, args.size)
    thread = threading.Thread(target=writer.run, name="writer", daemon=True)
    admin = admin_ctl = None
    ok = False
    try:
        cluster.start()
        print(f"cluster: 3 nodes, {GROUP} primary/backup ack sync, controller {CONTROLLER}, data in {root}")
        for node in cluster.nodes:
            print(f"  {node.node_id} {node.address} pid {node.proc.pid if node.proc else '-'}")
        admin = Client(cluster.endpoints, GROUP, retry_timeout=60.0)
        admin_ctl = Client(cluster.endpoints, CONTROLLER, retry_timeout=60.0)
        admin.append(b"warm-up")  # each store creates its first segment and fills a window ahead now
        thread.start()
        ids = [n.node_id for n in cluster.nodes]
        times: list[float] = []
        for rnd in range(1, args.rounds + 1):
            healthy = wait_healthy(admin, cluster, 60)
            if healthy is None:
                print(f"round {rnd}: the group did not settle within 60 s (every node up, both backups in the "
                      f"recorded in-sync set): stopping. Status: {group_status(admin, cluster)}")
                break
            primary, epoch = healthy
            time.sleep(args.warm)
            ctl = controller_leader(admin_ctl)
            i = ids.index(primary)
            before = len(writer.acked)
            t_kill = time.monotonic()
            cluster.kill(i, signal.SIGKILL)
            t_dead = time.monotonic()
            t_ack = writer.first_ack_after(t_dead, 60)
            if t_ack is None:
                print(f"round {rnd}: killed {primary} (epoch {epoch}): no append acknowledged within 60 s"
                      + (f" (writer stopped: {writer.error})" if writer.error else ""))
                break
            took = t_ack - t_kill
            times.append(took)
            docs = group_status(admin, cluster)
            new = next((n for n, d in docs.items() if d.get("role") == "leader"), "?")
            new_epoch = docs.get(new, {}).get("epoch", "?")
            note = "the controller leader too" if ctl == primary else f"controller leader {ctl}"
            print(f"round {rnd}: killed {primary}, primary of epoch {epoch} ({note}); {new} primary of epoch "
                  f"{new_epoch}; first ack after {took:.3f} s ({len(writer.acked) - before} acks since)")
            cluster.start(i)
        writer.stop.set()
        thread.join(60)
        if times:
            print(f"failover (kill -> first ack on the new primary), {len(times)} rounds: "
                  f"median {statistics.median(times):.3f} s, max {max(times):.3f} s")
        if writer.error is not None:
            print(f"writer stopped with {type(writer.error).__name__}: {writer.error}")
        if wait_healthy(admin, cluster, 60) is None:
            print("the group did not settle after the last round; reading back anyway")
        ok, lines = verify(admin, writer)
        print("\n".join(lines))
        print("no acknowledged append lost" if ok else "CHECK FAILED: see above")
    finally:
        writer.stop.set()
        for c in (admin, admin_ctl):
            if c is not None:
                c.close()
        statuses = cluster.stop()
        print("stopped: " + ", ".join(f"{k} exit {v}" for k, v in statuses.items()))
        if args.keep:
            print(f"data kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
