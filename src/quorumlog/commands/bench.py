"""`quorumlog bench`: throughput, one-at-a-time latency and failover time of a cluster.

The bench process is the client (its own process, apart from the nodes). `--local N` starts a local
cluster of N `quorumlog serve` processes for the run and stops it afterwards; failover is measured only
then (the bench must be able to SIGKILL the leader). `--replication primary-backup` makes that cluster's
group a primary/backup group (primary n0, `--ack sync|async`, no controller): its failover is the
operator's, `promote` of the most up-to-date live backup right after the kill (docs/replication.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack

from ..argtypes import non_negative, positive, seconds
from ..errors import ConfigError
from .client_cmds import add_connection_args, read_secret, tls_context
from .sigterm import exit_on_sigterm


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure appends/s, latency and failover", description=(
        "Measure appends/s and MiB/s for a payload size with C connections and K requests in flight each "
        "(batches of B entries), single-append latency one at a time, and (with --local) failover time ("
        "SIGKILL the leader, time until the next append succeeds; a primary/backup group's primary is "
        "killed and the most up-to-date backup promoted, as an operator would)."))
    add_connection_args(p)
    p.add_argument("--local", type=positive, metavar="N", help="start a local cluster of N nodes for the run")
    p.add_argument("--data-dir", help="data directory of the --local cluster (default: a temp dir)")
    p.add_argument("--flush", choices=("sync", "async"), default="sync", help="--local nodes' flush mode")
    p.add_argument("--replication", choices=("raft", "primary-backup"), default=None,
                   help="the --local group's replication (default raft)")
    p.add_argument("--ack", choices=("sync", "async"), default=None,
                   help="primary-backup: answer once the in-sync backups acked (sync, the default) or at the "
                        "primary's flush (async)")
    p.add_argument("--size", type=non_negative, default=1024, help="payload bytes per entry (default 1024)")
    p.add_argument("--seconds", type=seconds, default=10.0, help="throughput phase length (default 10; 0 skips "
                   "it); the --single and --failovers phases follow it")
    p.add_argument("--connections", type=positive, default=2, help="client connections (default 2)")
    p.add_argument("--inflight", type=positive, default=8, help="requests in flight per connection (default 8)")
    p.add_argument("--batch", type=positive, default=256, help="entries per request (default 256; 1 = single)")
    p.add_argument("--single", type=non_negative, default=2000, help="one-at-a-time appends for latency (default 2000)")
    p.add_argument("--failovers", type=non_negative, default=None,
                   help="leader kills with --local (default 5 where a leader or a SYNC backup remains, else 0; "
                        "0 skips)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--no-idempotent", dest="idempotent", action="store_false",
                   help="plain appends, without the idempotent producer's (producer, sequence)")
    p.add_argument("--ends", type=_fraction, default=0.0, metavar="F",
                   help="this fraction of the throughput phase's requests are END queries (default 0; e.g. 0.1)")
    p.add_argument("--end-consistency", choices=("linearizable", "local"), default="linearizable",
                   help="the consistency of those END queries (default linearizable: a ReadIndex round each)")
    p.set_defaults(func=_bench)


def _fraction(text: str) -> float:
    v = float(text)
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text}")
    return v


def _secret(args: argparse.Namespace) -> str | None:
    """The clients' secret: the --local cluster's (it has none), else the command line's or environment's."""
    return None if args.local else read_secret(args)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _lat(values: list[float]) -> dict[str, float]:
    return {k: round(_pct(values, q) * 1000, 3) for k, q in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99),
                                                               ("p999_ms", 0.999))} | {
        "max_ms": round(max(values, default=0) * 1000, 3)}


def fsync_probe(directory: str, size: int, n: int = 200) -> dict[str, float]:
    """pwrite(size) + fdatasync, n times, into a pre-filled file: the disk's floor under an ack."""
    path = os.path.join(directory, ".fsync-probe")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, bytes(size * n), 0)
        os.fsync(fd)
        block = os.urandom(size)
        lat = []
        for i in range(n):
            t = time.perf_counter()
            os.pwrite(fd, block, i * size)
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
        return _lat(lat)
    finally:
        os.close(fd)
        os.unlink(path)


# An echo process for loopback_probe: Python and blocking sockets on both ends.
_ECHO = """
import socket
s = socket.create_server(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while b := c.recv(65536):
    c.sendall(b)
"""


def round_trip(s: socket.socket, msg: bytes) -> float:
    """Seconds to send `msg` on a blocking socket and receive as many bytes back."""
    t = time.perf_counter()
    s.sendall(msg)
    got = 0
    while got < len(msg):
        chunk = s.recv(len(msg) - got)
        if not chunk:
            raise OSError("the other end closed the connection")
        got += len(chunk)
    return time.perf_counter() - t


def loopback_probe(size: int = 100, n: int = 2000) -> dict[str, float]:
    """Round trips of `size` bytes to an echo process over loopback. Two of them and one fdatasync (the
    fsync probe) are the floor under one acknowledged append: client to leader, leader to follower."""
    proc = subprocess.Popen([sys.executable, "-c", _ECHO], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            msg = os.urandom(size)
            return _lat([round_trip(s, msg) for _ in range(n)])
    finally:
        proc.kill()
        proc.wait()


async def _throughput(args: argparse.Namespace, progress: Any) -> dict[str, Any]:
    from ..client import _BATCH_ANSWER, AsyncClient
    from ..net.ops import Op
    from ..net.schemas import APPEND_BATCH_REQUEST, APPEND_REQUEST, APPEND_RESPONSE

    payload = os.urandom(args.size)
    batch = max(1, args.batch)
    clients = [AsyncClient(args.endpoints, args.group, cluster=args.cluster, secret=_secret(args),
                           token=args.token, tls=tls_context(args),
                           retry_timeout=args.timeout, idempotent=args.idempotent) for _ in range(args.connections)]
    # The request body is the same every time: encode it once (the client's CPU is not what we measure).
    if batch == 1:
        op, body, schema = Op.APPEND, APPEND_REQUEST.encode(args.group, payload), APPEND_RESPONSE
    else:
        op, body, schema = Op.APPEND_BATCH, APPEND_BATCH_REQUEST.encode(args.group, [payload] * batch), \
            _BATCH_ANSWER
    # With the idempotent producer each request also carries (producer, seq, expected_end = none): the
    # same array with three more fields, so only those are packed per request.
    head, fields = b"\x95", body[1:]
    lat: list[float] = []
    end_lat: list[float] = []
    done = [0]
    loop = asyncio.get_running_loop()
    draw = random.Random(0).random

    async def send(c: AsyncClient) -> None:
        if not args.idempotent:
            await c._leader_call(op, body, schema, uncertain_ok=True)
            return
        producer, seq = await c.producer.take()
        try:
            request = b"".join((head, fields, msgpack.packb(producer), msgpack.packb(seq), msgpack.packb(-2)))
            await c._leader_call(op, request, schema, uncertain_ok=True)
        finally:
            await c.producer.release(producer, seq)

    for c in clients:  # connect and find the leader before the clock starts
        await send(c)
    t0 = loop.time()
    stop_at = t0 + args.seconds

    async def worker(c: AsyncClient) -> None:
        while loop.time() < stop_at:
            t = time.perf_counter()
            if args.ends and draw() < args.ends:  # (the client asks its known leader: one ReadIndex round)
                await c.end(consistency=args.end_consistency)
                end_lat.append(time.perf_counter() - t)
                continue
            await send(c)
            lat.append(time.perf_counter() - t)
            done[0] += batch

    async def report() -> None:
        while loop.time() < stop_at:
            await asyncio.sleep(0.2)
            progress(min(1.0, (loop.time() - t0) / args.seconds), done[0] / max(1e-9, loop.time() - t0))

    try:
        await asyncio.gather(report(), *(worker(c) for c in clients for _ in range(args.inflight)))
    finally:
        elapsed = loop.time() - t0
        retries = sum(c.retries for c in clients)
        for c in clients:
            await c.close()
    rate = done[0] / elapsed
    out = {"entries": done[0], "seconds": round(elapsed, 3), "appends_per_s": round(rate),
           "mib_per_s": round(rate * args.size / (1 << 20), 1), "request_latency": _lat(lat), "retries": retries}
    if end_lat:
        out.update(ends=len(end_lat), ends_per_s=round(len(end_lat) / elapsed), end_latency=_lat(end_lat),
                   end_consistency=args.end_consistency)
    return out


async def _single(args: argparse.Namespace) -> dict[str, Any]:
    from ..client import AsyncClient

    payload = os.urandom(args.size)
    lat = []
    async with AsyncClient(args.endpoints, args.group, cluster=args.cluster, secret=_secret(args),
                           token=args.token, tls=tls_context(args),
                           idempotent=args.idempotent) as c:
        await c.append(payload)
        for _ in range(args.single):
            t = time.perf_counter()
            await c.append(payload)
            lat.append(time.perf_counter() - t)
    return {"appends": args.single, **_lat(lat)}


async def _failovers(args: argparse.Namespace, cluster: Any) -> dict[str, Any]:
    from ..client import AsyncClient

    times = []
    ids = [n.node_id for n in cluster.nodes]
    promote = cluster.replication == "primary-backup"
    async with AsyncClient(cluster.endpoints, args.group, retry_timeout=30) as c:
        for _ in range(args.failovers):
            await c.append(b"before")
            leader = c.leader
            assert leader is not None
            i = ids.index(leader)
            cluster.kill(i, signal.SIGKILL)
            t = time.perf_counter()
            if promote:
                await _promote_best(c, leader)
            await c.append(b"after")
            times.append(time.perf_counter() - t)
            cluster.start(i)
            # Let the restarted node catch up before the next round, bounded.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                md = await c.metadata(with_nodes=True)
                ends = {(n or {}).get("committed_index") for n in md.nodes.values()}
                if len(ends) == 1 and None not in ends:
                    break
                await asyncio.sleep(0.1)
    return {"rounds": len(times), "median_s": round(statistics.median(times), 3) if times else None,
            "max_s": round(max(times), 3) if times else None, "all_s": [round(x, 3) for x in times],
            "how": "kill, promote the most up-to-date backup, append" if promote else "kill, election, append"}


async def _promote_best(c: Any, dead: str) -> None:
    """Promote the live backup with the longest log (last epoch, then end index): what an operator
    running `quorumlog promote` after a primary's crash would pick. Retried briefly: right after the kill
    a backup may not have answered its status yet."""
    from ..errors import QuorumLogError

    deadline = time.monotonic() + 10
    while True:
        md = await c.metadata(with_nodes=True)
        live = {n: d for n, d in md.nodes.items() if d is not None and n != dead}
        if live:
            best = max(live, key=lambda n: (int(live[n].get("last_epoch", 0)), int(live[n]["end_index"])))
            try:
                await c.promote(best)
                return
            except (QuorumLogError, OSError):
                if time.monotonic() > deadline:
                    raise
        elif time.monotonic() > deadline:
            raise RuntimeError(f"no backup answered after the primary {dead} was killed")
        await asyncio.sleep(0.05)


def _failover_refusal(nodes: int | None, replication: str, ack: str) -> str | None:
    """Why failovers cannot be timed on this --local cluster (no append could succeed after the kill)."""
    if not nodes:
        return None
    if nodes < 2:
        return "a single node has no one to take over"
    if replication == "primary-backup" and ack == "sync" and nodes < 3:
        return ("the promoted primary would have no backup, and a SYNC primary without one answers "
                "SLAVE_NOT_AVAILABLE; use --local 3 or more, or --ack async")
    return None


def _warm_up(args: argparse.Namespace) -> None:
    """One append through every replica of a new group (retried until it has a leader or a confirmed
    primary)."""
    from ..client import Client

    with Client(args.endpoints, args.group, retry_timeout=60.0) as c:
        c.append(b"warm-up")


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, TextColumn, TimeRemainingColumn

    from ..progress import progress as progress_bar
    from ..server.cluster import LocalCluster

    console = Console(stderr=True)
    if not args.local and (args.replication is not None or args.ack is not None):
        console.print("[red]quorumlog bench: --replication and --ack configure the cluster --local starts; "
                      "a running cluster's group keeps its own settings[/red]", soft_wrap=True)
        return 2
    replication = args.replication or "raft"
    if replication == "raft" and args.ack is not None:
        console.print("[red]quorumlog bench: --ack applies to --replication primary-backup (a Raft group "
                      "answers once a majority holds the entry)[/red]", soft_wrap=True)
        return 2
    ack = args.ack or "sync"
    result: dict[str, Any] = {"size": args.size, "connections": args.connections, "inflight": args.inflight,
                              "batch": args.batch, "cpus": os.cpu_count()}
    if args.local:
        result["replication"] = replication
        if replication == "primary-backup":
            result["ack"] = ack
    refused = _failover_refusal(args.local, replication, ack)
    if args.failovers is None:
        args.failovers = 0 if refused else 5
    elif args.failovers > 0 and refused:
        console.print(f"[red]quorumlog bench: no failover can be timed here: {refused} (or --failovers 0)[/red]",
                      soft_wrap=True)
        return 2
    cluster = None
    tmp = None
    # SIGTERM ends the run as Ctrl-C does: the nodes (in sessions of their own) are stopped, the data removed.
    old_term = signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        if args.local:
            root = args.data_dir or (tmp := tempfile.mkdtemp(prefix="quorumlog-bench-"))
            ha = {"ack": ack} if replication == "primary-backup" else {}
            cluster = LocalCluster(Path(root), args.local, 1, flush=args.flush, replication=replication, ha=ha)
            try:
                cluster.check_configs()
            except ConfigError as e:
                console.print(f"[red]quorumlog bench: {e}[/red]", soft_wrap=True)
                return 2
            cluster.start()
            args.endpoints = cluster.endpoints
            args.group = "g0"
            result["cluster"] = {"nodes": args.local, "flush": args.flush, "data_dir": str(root),
                                 "replication": replication} | ({"ack": ack} if ha else {})
            # One append through every replica first: the stores then fill their first window of blocks
            # ahead (store/segments.py) before the timed phase, as they stay ahead afterwards.
            _warm_up(args)
            time.sleep(0.5)
            result["disk_fsync"] = fsync_probe(str(root), args.size)
        from ..net.loop import loop_factory

        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            with progress_bar(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[rate]}"),
                              TimeRemainingColumn(), console=console) as bar:
                task = bar.add_task(f"appends of {args.size} B", total=1.0, rate="")

                def progress(frac: float, rate: float) -> None:
                    bar.update(task, completed=frac, rate=f"{rate:,.0f}/s")

                if args.seconds > 0:
                    result["throughput"] = runner.run(_throughput(args, progress))
            if args.single > 0:
                console.print(f"single appends, one at a time ({args.single})…")
                result["single"] = runner.run(_single(args))
                if "disk_fsync" in result:  # the floor beside it, measured now
                    result["loopback_rtt"] = loopback_probe(args.size)
                    floor = 2 * result["loopback_rtt"]["p50_ms"] + result["disk_fsync"]["p50_ms"]
                    result["floor_ms"] = round(floor, 3)
                    result["single"]["p50_vs_floor"] = round(result["single"]["p50_ms"] / floor, 2)
            if cluster is not None and args.failovers > 0:
                who = "primary (then promote)" if replication == "primary-backup" else "leader"
                console.print(f"failover: SIGKILL the {who} {args.failovers} times…")
                result["failover"] = runner.run(_failovers(args, cluster))
    finally:
        if cluster is not None:
            cluster.stop()
        if tmp is not None:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        signal.signal(signal.SIGTERM, old_term)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


def _print(r: dict[str, Any]) -> None:
    from rich.table import Table

    from ..progress import table_console

    modes = {"raft": "Raft", "primary-backup": f"primary/backup {r.get('ack', '').upper()}"}
    mode = modes.get(r.get("replication", ""))
    t = Table(title=f"quorumlog bench: {r['size']} B entries, {r['connections']} connections × {r['inflight']} "
                    f"in flight, batches of {r['batch']}" + (f", {mode}" if mode else ""))
    t.add_column("measure")
    t.add_column("value", justify="right")
    if "throughput" in r:
        tp = r["throughput"]
        t.add_row("appends/s", f"{tp['appends_per_s']:,}")
        t.add_row("MiB/s", f"{tp['mib_per_s']}")
        rl = tp["request_latency"]
        t.add_row("request latency p50 / p99 / max", f"{rl['p50_ms']} / {rl['p99_ms']} / {rl['max_ms']} ms")
        if "ends" in tp:
            el = tp["end_latency"]
            t.add_row(f"{tp['end_consistency']} ENDs/s", f"{tp['ends_per_s']:,}")
            t.add_row("END latency p50 / p99 / max", f"{el['p50_ms']} / {el['p99_ms']} / {el['max_ms']} ms")
    if "single" in r:
        s = r["single"]
        t.add_row("one-at-a-time p50 / p99 / max", f"{s['p50_ms']} / {s['p99_ms']} / {s['max_ms']} ms")
    if "disk_fsync" in r:
        d = r["disk_fsync"]
        t.add_row("disk pwrite+fdatasync p50 / p99", f"{d['p50_ms']} / {d['p99_ms']} ms")
    if "floor_ms" in r:
        t.add_row("loopback round trip p50", f"{r['loopback_rtt']['p50_ms']} ms")
        t.add_row("floor (2 round trips + fdatasync)", f"{r['floor_ms']} ms; one-at-a-time p50 = "
                  f"{r['single']['p50_vs_floor']}×")
    if "failover" in r:
        f = r["failover"]
        t.add_row(f"failover median / max ({f['how']})", f"{f['median_s']} / {f['max_s']} s ({f['rounds']} rounds)")
    table_console().print(t)
