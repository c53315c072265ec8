"""How quorumlog's cost grows: with the groups a node hosts, with the length of a log, with the producers.

    .venv/bin/python benchmarks/scale_bench.py [--groups 1,10,100,300] [--log-entries 1000000,10000000]
        [--producers 10,1000,100000] [--quick] [--json PATH]

With none of --groups, --log-entries and --producers every section runs with its default list; with any of
them, only those sections. --quick runs a small version of the sections selected (all by default) as a smoke
test of well under a minute. Every cluster runs on 127.0.0.1 (ephemeral ports) in a temporary directory,
with the default node and store settings; its processes are stopped by their pids and the directory removed
afterwards, also after an error, Ctrl-C or SIGTERM. Each wait is bounded (--timeout).

1. Groups per node (--groups N,...). A 3-node cluster hosting N Raft groups: the time from starting the
   processes until every group has a leader (each node's /status polled every 0.2 s, the leader's own
   word counting); then, once the disk is quiet (the stores' fill-ahead windows allocated), an idle window
   (--window, default 10 s) measuring per node: CPU as % of one core (utime + stime from /proc/PID/stat),
   RSS (/proc/PID/status), and peer messages sent per second (quorumlog_peer_messages_sent_total from
   /metrics, scraped before and after: the node counts every message it sends, with no peer or type
   label). Disk: allocated blocks under the data directory (as du counts them) / (N x 3) replicas. Last,
   aggregate append throughput: --append-concurrency appends of --append-size bytes in flight from one
   asyncio process, one AsyncClient per group, the groups taken in turn, for --append-seconds.
2. Log length (--log-entries COUNT,...). A one-node group's store filled with COUNT entries of
   --log-body bytes straight through FileStore (batched appends, no network; each --log-request entries
   one idempotent request of one of 1,000 producers, as clients write them), then: the start-up of
   `quorumlog serve` on it until it answers a GET of the last entry, first with no producer snapshot
   (the log was written offline: the whole log is read), then after a clean shutdown (which saves the
   producer table beside the log, core/producer_snapshot.py) and after kill -9 (the recovery path). The
   page cache is warm (the log was just written). The script also times a rebuild of the producer table
   from the whole log (FileStore open, ProducerTable.rebuild without a snapshot) in its own process, and
   reports its share of the first start-up. The space needed is printed first; a count that would leave
   less than 5 GiB free is refused.
3. Producers (--producers P,...). A 3-node cluster with one group; P idempotent producers append
   --producer-entries entries each, one request per entry. Up to --max-real-producers, each producer is a
   real AsyncClient with a connection of its own to the leader, all at once. Beyond that, --mux-connections
   AsyncClients take the producer ids in turn (the client's `producer` replaced by one with that id between
   appends): the node sees P distinct producers, but only that many requests are in flight. Measured: the
   append rate (appends/s over the phase) and every node's RSS growth across it, with the group's producer
   count from /status.

Output: a table per section on stdout (units in the headings); --json PATH writes every figure as JSON.
Exit status 0, or 1 when a measurement failed or a process was left running, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

from quorumlog.client import AsyncClient
from quorumlog.client.producer import PRODUCER_WINDOW, Producer
from quorumlog.config import load_node_config
from quorumlog.core.producers import ProducerTable
from quorumlog.entry import HEADER_SIZE, INDEX_UNIT_SIZE, META_SIZE, pack_meta
from quorumlog.errors import QuorumLogError
from quorumlog.server.cluster import LocalCluster, LocalNode
from quorumlog.store.file_store import FileStore, store_dir
from quorumlog.store.segments import FILL_AHEAD, FILL_MIN_AHEAD

MiB = 1 << 20
GiB = 1 << 30
KEEP_FREE = 5 * GiB  # never fill the disk below this
# A replica allocates a window ahead of its writer in its data and its index segments (store/segments.py): from
# FILL_MIN_AHEAD each for an idle one up to FILL_AHEAD each for a fast writer.
IDLE_REPLICA = 2 * FILL_MIN_AHEAD
FILL_PER_REPLICA = 2 * FILL_AHEAD
CLK_TCK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.2
LOG_PRODUCERS = 1000  # producers the built logs' requests are spread over
BUILD_BATCH = 4096  # entries per FileStore.append while building a log
QUICK = {"groups": [1, 3], "log_entries": [100_000], "producers": [20, 2000], "window": 2.0,
         "append_seconds": 2.0, "max_real_producers": 100, "producer_entries": 2}

T = TypeVar("T")
console = Console(stderr=True, highlight=False)  # progress; the tables go to stdout


class BenchError(Exception):
    """A measurement that could not be made (a node died, a wait timed out): reported, the run goes on."""


# -- processes and files ---------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads), from /proc/PID/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": field 3 (state) is fields[0]
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: fields 14 and 15


def memory(pid: int) -> dict[str, int]:
    """Resident memory of process `pid` from /proc/PID/status, bytes: "rss" (all), "anon" (heap, stacks: what
    the process allocated) and "file" (file pages it maps: the store's segments are read through mmap)."""
    keys = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file"}
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = keys.get(line.split(" ", 1)[0].split("\t", 1)[0])
        if key is not None:
            out[key] = int(line.split()[1]) * 1024
    if len(out) != len(keys):
        raise BenchError(f"no VmRSS, RssAnon or RssFile for pid {pid}")
    return out


def disk_used(path: Path) -> int:
    """Bytes of blocks allocated under `path`, as du counts them (sparse files count what they hold)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # a temp file replaced meanwhile
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def wait_disk_quiet(path: Path, timeout: float, still_s: float = 1.0) -> float:
    """Wait until the blocks allocated under `path` stop growing for `still_s` (bounded); seconds waited."""
    t0 = time.monotonic()
    last = disk_used(path)
    while time.monotonic() - t0 < timeout:
        time.sleep(still_s)
        now = disk_used(path)
        if now == last:
            break
        last = now
    return time.monotonic() - t0


def pid_of(node: LocalNode) -> int:
    if node.proc is None or node.proc.poll() is not None:
        raise BenchError(f"{node.node_id} is not running (exit {node.proc and node.proc.returncode}); "
                         f"its log: {log_tail(node)}")
    return node.proc.pid


def record_run(rows: list[dict[str, Any]], key: str, value: int, label: str,
               run: Callable[[int, argparse.Namespace], dict[str, Any]], a: argparse.Namespace) -> None:
    """`run(value, a)`'s figures appended to `rows`; a failed run's error in their place (the others go on)."""
    try:
        rows.append(run(value, a))
    except BenchError as e:
        console.print(f"[red]  {label}: {e}[/red]")
        rows.append({key: value, "error": str(e)})


def log_tail(node: LocalNode, lines: int = 5) -> str:
    try:
        return " | ".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def children() -> list[str]:
    """This process's child processes still alive (there should be none at the end)."""
    ps = subprocess.run(["ps", "--ppid", str(os.getpid()), "-o", "pid=,args="], capture_output=True, text=True,
                        timeout=10)
    return [line.strip() for line in ps.stdout.splitlines() if line.strip() and "ps --ppid" not in line]


@contextlib.contextmanager
def temp_cluster(prefix: str, nodes: int, groups: int) -> Any:
    """A LocalCluster (default settings) in a new temp dir; stopped by its pids and removed on the way out."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = None
    try:
        cluster = LocalCluster(root, nodes, groups)
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def free_bytes(path: str) -> int:
    return shutil.disk_usage(path).free


def room_for(needed: int, what: str) -> bool:
    """Whether `needed` more bytes leave KEEP_FREE free in the temp dir's file system; says why not."""
    free = free_bytes(tempfile.gettempdir())
    if free - needed >= KEEP_FREE:
        return True
    console.print(f"[yellow]{what}: skipped, it needs about {needed / GiB:.1f} GiB and {free / GiB:.1f} GiB "
                  f"is free in {tempfile.gettempdir()}: at least {KEEP_FREE / GiB:.0f} GiB must stay free[/yellow]")
    return False


# -- the admin port --------------------------------------------------------------------------------------


def http_get(url: str, timeout: float = 5.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except (OSError, urllib.error.URLError):
        return None


def status(node: LocalNode) -> dict[str, Any] | None:
    body = http_get(node.admin_url + "/status")
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def metric_sum(text: str, name: str) -> float | None:
    """The sum of every series of metric `name` in a Prometheus text page; None when it has none."""
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " ")]
    return sum(values) if values else None


def leaders(cluster: LocalCluster) -> dict[str, str]:
    """Each group's leader, as the node that leads it says (every node's /status read once)."""
    out: dict[str, str] = {}
    for node in cluster.nodes:
        pid_of(node)  # a node that died ends the wait now
        doc = status(node) or {}
        for name, g in (doc.get("groups") or {}).items():
            if isinstance(g, dict) and g.get("role") == "leader":
                out[name] = node.node_id
    return out


def wait_all_led(cluster: LocalCluster, timeout: float) -> dict[str, str]:
    """Wait until every group has a leader; its leaders, or BenchError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        led = leaders(cluster)
        if len(led) == cluster.groups:
            return led
        if time.monotonic() > deadline:
            raise BenchError(f"only {len(led)} of {cluster.groups} groups had a leader after {timeout:.0f} s")
        time.sleep(POLL_S)


def leader_node(cluster: LocalCluster, group: str, timeout: float) -> LocalNode:
    led = wait_all_led(cluster, timeout)
    return next(n for n in cluster.nodes if n.node_id == led[group])


# -- clients ---------------------------------------------------------------------------------------------


async def bounded_map(fn: Callable[[T], Awaitable[Any]], items: Iterable[T], limit: int) -> list[Any]:
    """Await fn(item) for every item, at most `limit` at once (connections: a node handshakes at most 16
    per address at once)."""
    sem = asyncio.Semaphore(limit)

    async def one(item: T) -> Any:
        async with sem:
            return await fn(item)

    return await asyncio.gather(*(one(i) for i in items))


async def close_all(clients: Iterable[AsyncClient]) -> None:
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


@dataclass
class Rate:
    done: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def fail(self, e: BaseException) -> None:
        self.failed += 1
        key = type(e).__name__
        self.errors[key] = self.errors.get(key, 0) + 1

    @property
    def per_s(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0


async def spread_appends(endpoints: str, groups: list[str], seconds: float, concurrency: int, size: int,
                         timeout: float) -> Rate:
    """Appends of `size` bytes to every group in turn, `concurrency` in flight, for `seconds` (after one
    untimed append per group: connections made, leaders found)."""
    clients = {g: AsyncClient(endpoints, g, retry_timeout=timeout) for g in groups}
    body = b"s" * size
    rate = Rate()
    try:
        await bounded_map(lambda c: c.append(body), clients.values(), 8)
        order = itertools.cycle(groups)
        t0 = time.monotonic()
        end = t0 + seconds

        async def worker() -> None:
            while time.monotonic() < end:
                try:
                    await clients[next(order)].append(body)
                    rate.done += 1
                except QuorumLogError as e:
                    rate.fail(e)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        rate.seconds = time.monotonic() - t0
    finally:
        await close_all(clients.values())
    return rate


async def wait_read(endpoint: str, index: int, timeout: float) -> float:
    """Seconds until the node at `endpoint` answers a GET of `index` (polled every 10 ms); BenchError after
    `timeout`."""
    t0 = time.monotonic()
    last: BaseException | None = None
    async with AsyncClient(endpoint, "g0", retry_timeout=0.2, connect_timeout=0.5, request_timeout=2.0) as c:
        while time.monotonic() - t0 < timeout:
            try:
                await c.get(index)
                return time.monotonic() - t0
            except (QuorumLogError, OSError) as e:
                last = e
            await asyncio.sleep(0.01)
    raise BenchError(f"no read of index {index} answered within {timeout:.0f} s (last: {last})")


# -- section 1: groups per node --------------------------------------------------------------------------


def idle_window(cluster: LocalCluster, seconds: float) -> dict[str, dict[str, float | None]]:
    """Per node: CPU % of one core, RSS and peer messages sent per second over `seconds` of idling."""
    def scrape() -> dict[str, tuple[float, float | None, float | None]]:
        out = {}
        for n in cluster.nodes:
            page = (http_get(n.admin_url + "/metrics") or b"").decode()
            out[n.node_id] = (time.monotonic(), metric_sum(page, "quorumlog_peer_messages_sent_total"),
                              metric_sum(page, "quorumlog_elections_total"))
        return out

    before = scrape()
    cpu0 = {n.node_id: (time.monotonic(), cpu_seconds(pid_of(n))) for n in cluster.nodes}
    time.sleep(seconds)
    cpu1 = {n.node_id: (time.monotonic(), cpu_seconds(pid_of(n))) for n in cluster.nodes}
    mem = {n.node_id: memory(pid_of(n)) for n in cluster.nodes}
    after = scrape()
    out: dict[str, dict[str, float | None]] = {}
    for n in cluster.nodes:
        (t0, c0), (t1, c1) = cpu0[n.node_id], cpu1[n.node_id]
        (m0, s0, _e0), (m1, s1, elections) = before[n.node_id], after[n.node_id]
        msgs = (s1 - s0) / (m1 - m0) if s0 is not None and s1 is not None else None
        out[n.node_id] = {"cpu_pct": 100 * (c1 - c0) / (t1 - t0), "rss_mib": mem[n.node_id]["rss"] / MiB,
                          "rss_anon_mib": mem[n.node_id]["anon"] / MiB,
                          "peer_msgs_per_s": msgs, "elections_since_start": elections}
    return out


def one_groups_run(n: int, a: argparse.Namespace) -> dict[str, Any]:
    with temp_cluster(f"quorumlog-scale-g{n}-", 3, n) as cluster:
        t0 = time.monotonic()
        cluster.start()
        led = wait_all_led(cluster, a.timeout)
        res: dict[str, Any] = {"groups": n, "all_led_s": time.monotonic() - t0,
                               "leaders": {x.node_id: list(led.values()).count(x.node_id) for x in cluster.nodes}}
        console.print(f"  {n} groups: every group led after {res['all_led_s']:.2f} s; waiting for the disk to be "
                      f"quiet, then {a.window:g} s idle…")
        res["disk_settle_s"] = wait_disk_quiet(cluster.root, a.timeout)
        res["nodes"] = idle_window(cluster, a.window)
        used = disk_used(cluster.root)
        res["disk_mib"] = used / MiB
        res["disk_per_replica_mib"] = used / (3 * n) / MiB
        if n > a.max_append_groups:
            console.print(f"  [yellow]{n} groups: throughput skipped (one client per group, over "
                          f"--max-append-groups {a.max_append_groups}: the nodes take 1,024 connections)[/yellow]")
        else:
            console.print(f"  {n} groups: appending for {a.append_seconds:g} s…")
            rate = asyncio.run(spread_appends(cluster.endpoints, cluster.group_names, a.append_seconds,
                                              a.append_concurrency, a.append_size, a.timeout))
            res |= {"appends": rate.done, "append_failures": rate.failed, "append_errors": rate.errors,
                    "appends_per_s": rate.per_s}
        for node in cluster.nodes:
            pid_of(node)  # all still alive at the end
        return res


def groups_section(a: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Each run's figures appended to `rows` as it ends (kept when a later one is interrupted)."""
    for n in a.groups:
        need = n * 3 * IDLE_REPLICA + GiB  # (and the appends' data: well under the GiB)
        if not room_for(need, f"{n} groups"):
            rows.append({"groups": n, "skipped": f"needs ~{need / GiB:.1f} GiB of disk"})
            continue
        console.print(f"groups per node: {n} groups on 3 nodes…")
        record_run(rows, "groups", n, f"{n} groups", one_groups_run, a)


def per_node(per: dict[str, dict[str, float | None]], key: str, fmt: str) -> str:
    """One figure of every node, "n0 / n1 / n2"."""
    return " / ".join("-" if (v := per[nid][key]) is None else fmt.format(v) for nid in sorted(per))


def per_node_rss(per: dict[str, dict[str, float | None]]) -> str:
    return " / ".join(f"{per[nid]['rss_mib']:.0f} ({per[nid]['rss_anon_mib']:.0f})" for nid in sorted(per))


def groups_table(rows: list[dict[str, Any]], a: argparse.Namespace) -> Table:
    t = Table(title=f"1. groups per node: 3 nodes, default settings; idle {a.window:g} s; appends of "
                    f"{a.append_size} B, {a.append_concurrency} in flight, {a.append_seconds:g} s")
    for heading in ("groups", "all led s", "groups led n0/n1/n2", "elections", "disk quiet s",
                    "CPU % of a core n0/n1/n2",
                    "RSS (anon) MiB n0/n1/n2",
                    "peer msgs/s n0/n1/n2", "disk MiB / replica", "appends/s"):
        t.add_column(heading, justify="right")
    for r in rows:
        if "nodes" not in r:
            t.add_row(str(r["groups"]), r.get("error") or r.get("skipped", "-"), *[""] * 8)
            continue
        per = r["nodes"]
        elections = [v for x in per.values() if (v := x["elections_since_start"]) is not None]
        t.add_row(str(r["groups"]), f"{r['all_led_s']:.2f}", " / ".join(str(v) for v in r["leaders"].values()),
                  f"{sum(elections):.0f}" if elections else "-",                  f"{r['disk_settle_s']:.1f}",
                  per_node(per, "cpu_pct", "{:.1f}"), per_node_rss(per),
                  per_node(per, "peer_msgs_per_s", "{:,.0f}"), f"{r['disk_per_replica_mib']:.1f}",
                  f"{r['appends_per_s']:,.0f}" if "appends_per_s" in r else "skipped")
    return t


# -- section 2: log length -------------------------------------------------------------------------------


def entry_bytes(a: argparse.Namespace) -> float:
    """Disk bytes per entry: header, body, index unit, and the metadata run of a request's first entry."""
    meta = META_SIZE / a.log_request if a.log_request else 0
    return HEADER_SIZE + a.log_body + INDEX_UNIT_SIZE + meta


def build_log(path: str, cfg: Any, count: int, a: argparse.Namespace) -> tuple[int, float]:
    """Append `count` entries to the (stopped) store at `path`, committed; (last index, seconds)."""
    store = FileStore(path, cfg)
    t0 = time.monotonic()
    try:
        body = b"b" * a.log_body
        term = max(store.end_term, 1)
        seqs = [0] * LOG_PRODUCERS
        wall = int(time.time() * 1000)
        req = a.log_request
        written = 0
        while written < count:
            n = min(BUILD_BATCH, count - written)
            metas = None
            if req:
                metas = {}
                for off in range(-(written % req) % req, n, req):  # the first entry of each request here
                    k = (written + off) // req
                    p = k % LOG_PRODUCERS
                    metas[off] = pack_meta(p + 1, seqs[p], min(req, count - written - off), wall)
                    seqs[p] += 1
            store.append([body] * n, term, metas=metas)
            written += n
        store.flush()
        store.set_committed(store.end_index)
        store.checkpoint()
        return store.end_index, time.monotonic() - t0
    finally:
        store.close()


def offline_rebuild(path: str, cfg: Any, window: int) -> tuple[float, float, int]:
    """In this process: (seconds to open the store, seconds to rebuild its producer table, producers)."""
    t0 = time.monotonic()
    store = FileStore(path, cfg, repair=True)
    t1 = time.monotonic()
    try:
        table = ProducerTable(window)
        table.rebuild(store)
        return t1 - t0, time.monotonic() - t1, len(table)
    finally:
        store.close()


def timed_start(cluster: LocalCluster, index: int, timeout: float) -> dict[str, float]:
    """Start the one node; seconds until it listens, and until it answers a GET of `index`; its RSS then."""
    node = cluster.nodes[0]
    t0 = time.monotonic()
    cluster.start(0)
    listening = None
    while time.monotonic() - t0 < timeout and listening is None:
        pid_of(node)
        with contextlib.suppress(OSError), socket.create_connection((node.host, node.port), timeout=0.5):
            listening = time.monotonic() - t0
        if listening is None:
            time.sleep(0.005)
    if listening is None:
        raise BenchError(f"the node did not listen within {timeout:.0f} s")
    asyncio.run(wait_read(node.address, index, timeout))
    read_s = time.monotonic() - t0
    mem = memory(pid_of(node))
    return {"listen_s": listening, "read_s": read_s, "rss_mib": mem["rss"] / MiB, "rss_anon_mib": mem["anon"] / MiB,
            "rss_file_mib": mem["file"] / MiB}


def one_log_run(count: int, a: argparse.Namespace) -> dict[str, Any]:
    with temp_cluster(f"quorumlog-scale-log{count}-", 1, 1) as cluster:
        node = cluster.nodes[0]
        cluster.start()
        asyncio.run(wait_read_after_append(node.address, a.timeout))  # bootstrapped: identity, first entries
        cluster.stop()
        path = store_dir(node.data_dir, "g0", node.node_id)
        group_cfg = load_node_config(node.config_path).groups[0]
        cfg, window = group_cfg.store, group_cfg.raft.producer_window
        console.print(f"  {count:,} entries: building the log…")
        last, build_s = build_log(path, cfg, count, a)
        res: dict[str, Any] = {"entries": count, "last_index": last, "build_s": build_s,
                               "disk_mib": disk_used(Path(path)) / MiB}
        console.print(f"  {count:,} entries: built in {build_s:.1f} s ({res['disk_mib']:,.0f} MiB); first start…")
        res["first"] = timed_start(cluster, last, a.timeout)  # no producer snapshot yet: the whole log read
        console.print(f"  {count:,} entries: read after {res['first']['read_s']:.2f} s; stop, start again…")
        cluster.stop()  # (a clean stop saves the producer table beside the log)
        res["clean"] = timed_start(cluster, last, a.timeout)
        console.print(f"  {count:,} entries: read after {res['clean']['read_s']:.2f} s; kill -9 and start again…")
        cluster.kill(0, signal.SIGKILL)
        res["crash"] = timed_start(cluster, last, a.timeout)
        res["recovery_notes"] = [line for line in node.log_path.read_text(errors="replace").splitlines()
                                 if "store recovery" in line]
        cluster.stop()
        open_s, rebuild_s, producers = offline_rebuild(path, cfg, window)
        res |= {"offline_open_s": open_s, "offline_rebuild_s": rebuild_s, "producers": producers,
                "rebuild_share_of_first_start": rebuild_s / res["first"]["read_s"]}
        return res


async def wait_read_after_append(endpoint: str, timeout: float) -> None:
    async with AsyncClient(endpoint, "g0", retry_timeout=timeout) as c:
        r = await c.append(b"first")
    await wait_read(endpoint, r.index, timeout)


def log_section(a: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Each run's figures appended to `rows` as it ends (kept when a later one is interrupted)."""
    per_entry = entry_bytes(a)
    console.print(f"log length: {per_entry:.0f} B of disk per entry ({a.log_body} B bodies"
                  + (f", a request of {a.log_request} entries each" if a.log_request else ", no producer metadata")
                  + "); " + ", ".join(f"{c:,} entries ≈ {(c * per_entry + FILL_PER_REPLICA) / GiB:.2f} GiB"
                                      for c in a.log_entries)
                  + f"; {free_bytes(tempfile.gettempdir()) / GiB:.1f} GiB free in {tempfile.gettempdir()}")
    for count in a.log_entries:
        need = int(count * per_entry * 1.05) + FILL_PER_REPLICA
        if not room_for(need, f"{count:,} entries"):
            rows.append({"entries": count, "skipped": f"needs ~{need / GiB:.1f} GiB of disk"})
            continue
        record_run(rows, "entries", count, f"{count:,} entries", one_log_run, a)


def log_table(rows: list[dict[str, Any]], a: argparse.Namespace) -> Table:
    t = Table(title=f"2. log length: one node, one group, {a.log_body} B entries built with FileStore; start of "
                    "`quorumlog serve` until a GET of the last entry answers (warm page cache)")
    for heading in ("entries", "build s", "disk MiB", "first: read s", "clean: listen s", "clean: read s",
                    "RSS (anon) MiB", "kill -9: listen s", "kill -9: read s", "store open s*", "producer rebuild s*",
                    "rebuild share"):
        t.add_column(heading, justify="right")
    for r in rows:
        if "clean" not in r:
            t.add_row(f"{r['entries']:,}", r.get("error") or r.get("skipped", "-"), *[""] * 10)
            continue
        f, c, k = r["first"], r["clean"], r["crash"]
        t.add_row(f"{r['entries']:,}", f"{r['build_s']:.1f}", f"{r['disk_mib']:,.0f}", f"{f['read_s']:.2f}",
                  f"{c['listen_s']:.2f}", f"{c['read_s']:.2f}", f"{c['rss_mib']:.0f} ({c['rss_anon_mib']:.0f})",
                  f"{k['listen_s']:.2f}", f"{k['read_s']:.2f}",
                  f"{r['offline_open_s']:.2f}", f"{r['offline_rebuild_s']:.2f}",
                  f"{100 * r['rebuild_share_of_first_start']:.0f} %")
    return t


# -- section 3: producers --------------------------------------------------------------------------------


async def real_producers(endpoint: str, count: int, entries: int, body: bytes, timeout: float) -> Rate:
    """`count` AsyncClients (a producer id and a connection each) append `entries` each, all at once."""
    clients = [AsyncClient(endpoint, "g0", retry_timeout=timeout) for _ in range(count)]
    rate = Rate()
    try:
        await bounded_map(lambda c: c.metadata(with_nodes=False), clients, 8)  # connected

        t0 = time.monotonic()
        await asyncio.gather(*(append_counted(c, entries, body, rate) for c in clients))
        rate.seconds = time.monotonic() - t0
    finally:
        await close_all(clients)
    return rate


async def append_counted(c: AsyncClient, entries: int, body: bytes, rate: Rate) -> None:
    """`entries` appends one at a time, each counted in `rate` as done or failed."""
    for _ in range(entries):
        try:
            await c.append(body)
            rate.done += 1
        except QuorumLogError as e:
            rate.fail(e)


async def mux_producers(endpoint: str, count: int, entries: int, body: bytes, connections: int,
                        timeout: float) -> Rate:
    """`count` producer ids over `connections` AsyncClients: each client takes its share of the ids in turn,
    its producer replaced between appends (none in flight then), so each id writes `entries` requests."""
    clients = [AsyncClient(endpoint, "g0", retry_timeout=timeout) for _ in range(min(connections, count))]
    base = random.Random().getrandbits(40) << 20  # distinct from any other run's ids
    rate = Rate()
    try:
        await bounded_map(lambda c: c.metadata(with_nodes=False), clients, 8)

        async def produce(k: int, c: AsyncClient) -> None:
            for i in range(k, count, len(clients)):
                c.producer = Producer(base + i + 1, PRODUCER_WINDOW, random.Random(i))
                await append_counted(c, entries, body, rate)

        t0 = time.monotonic()
        await asyncio.gather(*(produce(k, c) for k, c in enumerate(clients)))
        rate.seconds = time.monotonic() - t0
    finally:
        await close_all(clients)
    return rate


def group_producers(cluster: LocalCluster) -> dict[str, int | None]:
    out = {}
    for n in cluster.nodes:
        g = ((status(n) or {}).get("groups") or {}).get("g0") or {}
        out[n.node_id] = g.get("producers")
    return out


def one_producers_run(p: int, a: argparse.Namespace) -> dict[str, Any]:
    with temp_cluster(f"quorumlog-scale-p{p}-", 3, 1) as cluster:
        cluster.start()
        leader = leader_node(cluster, "g0", a.timeout)
        asyncio.run(spread_appends(leader.address, ["g0"], 0.5, 4, a.append_size, a.timeout))  # warm up
        wait_disk_quiet(cluster.root, a.timeout)
        mem0 = {n.node_id: memory(pid_of(n)) for n in cluster.nodes}
        producers0 = group_producers(cluster)
        body = b"p" * a.append_size
        real = p <= a.max_real_producers
        how = (f"{p} AsyncClients, a connection each to the leader, all at once" if real else
               f"{p} producer ids over {min(a.mux_connections, p)} AsyncClients (connections), taken in turn")
        console.print(f"  {p:,} producers: {how}, {a.producer_entries} appends each…")
        if real:
            rate = asyncio.run(real_producers(leader.address, p, a.producer_entries, body, a.timeout))
        else:
            rate = asyncio.run(mux_producers(leader.address, p, a.producer_entries, body, a.mux_connections,
                                             a.timeout))
        time.sleep(0.5)  # followers apply the last pushes
        mem1 = {n.node_id: memory(pid_of(n)) for n in cluster.nodes}
        growth = {nid: (mem1[nid]["rss"] - mem0[nid]["rss"]) / MiB for nid in mem0}
        anon = {nid: (mem1[nid]["anon"] - mem0[nid]["anon"]) / MiB for nid in mem0}
        return {"producers": p, "mode": "real" if real else "multiplexed", "how": how, "leader": leader.node_id,
                "appends": rate.done, "append_failures": rate.failed, "append_errors": rate.errors,
                "seconds": rate.seconds, "appends_per_s": rate.per_s,
                "rss_before_mib": {k: v["rss"] / MiB for k, v in mem0.items()},
                "rss_after_mib": {k: v["rss"] / MiB for k, v in mem1.items()}, "rss_growth_mib": growth,
                "rss_anon_growth_mib": anon, "leader_growth_per_producer_bytes": growth[leader.node_id] * MiB / p,
                "leader_anon_growth_per_producer_bytes": anon[leader.node_id] * MiB / p,
                "group_producers_before": producers0, "group_producers_after": group_producers(cluster)}


def producers_section(a: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Each run's figures appended to `rows` as it ends (kept when a later one is interrupted)."""
    for p in a.producers:
        console.print(f"producers: {p:,} on a 3-node cluster, one group…")
        record_run(rows, "producers", p, f"{p:,} producers", one_producers_run, a)


def producers_table(rows: list[dict[str, Any]], a: argparse.Namespace) -> Table:
    t = Table(title=f"3. producers: 3 nodes, one group; {a.producer_entries} appends of {a.append_size} B per "
                    f"producer; real = a connection per producer (up to {a.max_real_producers:,}), "
                    f"mux = ids over {a.mux_connections} connections")
    for heading in ("producers", "mode", "appends/s", "failed", "RSS growth MiB (leader first)",
                    "leader anon growth MiB", "leader bytes / producer (anon)", "producers in the group (leader)"):
        t.add_column(heading, justify="right")
    for r in rows:
        if "mode" not in r:
            t.add_row(f"{r['producers']:,}", r["error"], *[""] * 6)
            continue
        g = r["rss_growth_mib"]
        order = [r["leader"]] + sorted(k for k in g if k != r["leader"])
        t.add_row(f"{r['producers']:,}", r["mode"], f"{r['appends_per_s']:,.0f}", str(r["append_failures"]),
                  " / ".join(f"{g[k]:+.1f}" for k in order), f"{r['rss_anon_growth_mib'][r['leader']]:+.1f}",
                  f"{r['leader_growth_per_producer_bytes']:,.0f} ({r['leader_anon_growth_per_producer_bytes']:,.0f})",
                  str(r["group_producers_after"].get(r["leader"])))
    return t


# -- main ------------------------------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    try:
        values = [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="See the module docstring for what each section measures.")
    p.add_argument("--groups", type=int_list, help="section 1: groups per node (default 1,10,100,300)")
    p.add_argument("--log-entries", type=int_list, help="section 2: log lengths (default 1000000,10000000)")
    p.add_argument("--producers", type=int_list, help="section 3: producer counts (default 10,1000,100000)")
    p.add_argument("--quick", action="store_true", help="a small version of each section selected (smoke test)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every figure here as JSON")
    p.add_argument("--timeout", type=float, default=120.0, help="bound on each wait, seconds (default 120)")
    p.add_argument("--window", type=float, default=10.0, help="section 1: idle window, seconds (default 10)")
    p.add_argument("--append-seconds", type=float, default=5.0, help="section 1: append phase (default 5)")
    p.add_argument("--append-concurrency", type=int, default=16, help="section 1: appends in flight (default 16)")
    p.add_argument("--append-size", type=int, default=100, help="sections 1 and 3: body bytes (default 100)")
    p.add_argument("--max-append-groups", type=int, default=900,
                   help="section 1: no throughput phase above this many groups (a client per group; default 900)")
    p.add_argument("--log-body", type=int, default=16, help="section 2: body bytes (default 16)")
    p.add_argument("--log-request", type=int, default=1,
                   help="section 2: entries per producer request (default 1; 0: no producer metadata)")
    p.add_argument("--producer-entries", type=int, default=3, help="section 3: appends per producer (default 3)")
    p.add_argument("--max-real-producers", type=int, default=1000,
                   help="section 3: up to this many producers each get a connection (default 1000)")
    p.add_argument("--mux-connections", type=int, default=16,
                   help="section 3: connections the producer ids share beyond that (default 16)")
    a = p.parse_args(argv)
    chosen = [s for s in ("groups", "log_entries", "producers") if getattr(a, s) is not None]
    a.sections = chosen or ["groups", "log_entries", "producers"]
    defaults = {"groups": [1, 10, 100, 300], "log_entries": [1_000_000, 10_000_000],
                "producers": [10, 1000, 100_000]}
    for s in a.sections:
        if getattr(a, s) is None:
            setattr(a, s, QUICK[s] if a.quick else defaults[s])
    if a.quick:
        for k in ("window", "append_seconds", "max_real_producers", "producer_entries"):
            if getattr(a, k) == p.get_default(k):
                setattr(a, k, QUICK[k])
    if min(a.window, a.append_seconds, a.timeout) <= 0 or a.append_concurrency < 1 or a.mux_connections < 1:
        p.error("--window, --append-seconds and --timeout must be positive, concurrencies 1 or more")
    if a.log_body < 0 or a.log_request < 0 or a.producer_entries < 1:
        p.error("--log-body and --log-request must be 0 or more, --producer-entries 1 or more")
    return a


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: every `finally` runs (clusters stopped, temp dirs removed), the figures
    so far are printed, and the exit status is 143."""


def on_sigterm(_sig: int, _frame: object) -> None:
    raise Terminated


SECTIONS = {"groups": (groups_section, groups_table), "log_entries": (log_section, log_table),
            "producers": (producers_section, producers_table)}
NOTES = {
    "groups": "1. peer msgs/s: quorumlog_peer_messages_sent_total (the node counts each Raft or replication message "
              "it sends; it has no per-peer or per-message-type counter, so no such breakdown is given). CPU % is "
              f"of one core, all the process's threads ({os.cpu_count()} cores here, shared by the nodes, the "
              "client and whatever else runs). disk: blocks allocated under the data dir / (groups x 3). "
              "elections: quorumlog_elections_total of the three nodes at the end of the idle window (campaigns "
              "since start; a smooth start needs one a group).",
    "log_entries": "2. * store open and producer rebuild: timed in this process on the same store once the node "
                   "stopped, from the whole log; rebuild share = rebuild s / first start's read s. "
                   "disk MiB includes the window the store allocates ahead of its writer. RSS (anon): file pages "
                   "mapped from the segments are the rest.",
    "producers": "3. RSS growth: from after a warm-up append to 0.5 s after the last answer; real producers' "
                 "connections and buffers count in the leader's.",
}


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    doc: dict[str, Any] = {
        "taken_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(["scale_bench.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": {"cpus": os.cpu_count(), "loadavg_before": os.getloadavg()},
        "settings": {k: v for k, v in vars(a).items() if k != "json"},
        "notes": [NOTES[s] for s in a.sections]}
    started = time.monotonic()
    interrupted = 0
    try:
        for s in a.sections:
            doc[s] = []
            SECTIONS[s][0](a, doc[s])
    except KeyboardInterrupt as e:
        interrupted = 143 if isinstance(e, Terminated) else 130
        console.print("[yellow]interrupted: the figures so far[/yellow]")
    doc["machine"]["loadavg_after"] = os.getloadavg()
    doc["wall_s"] = round(time.monotonic() - started, 1)
    doc["leftover_processes"] = children()
    out = Console() if sys.stdout.isatty() else Console(width=200)
    for s in a.sections:
        if doc.get(s):
            out.print(SECTIONS[s][1](doc[s], a))
    for r in doc.get("producers") or []:
        if "how" in r:
            out.print(f"producers {r['producers']:,}: {r['how']}; {r['appends']:,} appends in {r['seconds']:.2f} s",
                      soft_wrap=True)
    for s in a.sections:
        if doc.get(s):
            out.print(NOTES[s], soft_wrap=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        console.print(f"figures written to {a.json}")
    if doc["leftover_processes"]:
        console.print(f"[red]processes left running: {doc['leftover_processes']}[/red]")
        return 1
    if interrupted:
        return interrupted
    failed = [r for s in a.sections for r in doc.get(s) or [] if "error" in r]
    console.print(f"done in {doc['wall_s']:.0f} s" + (f"; {len(failed)} measurement(s) failed" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
