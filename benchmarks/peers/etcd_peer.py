"""etcd as a peer: a 3-member cluster of Debian's `etcd` (package etcd-server) on 127.0.0.1, in a temp dir.

Load goes over etcd's own client protocol, gRPC (grpcio's asyncio API), to the leader: `KV/Put` with key
`k{n}` (n counts up) and the payload as value. The requests are protobuf messages encoded here by hand
(two length-delimited fields), so no generated code nor protobuf version is involved. etcd's JSON gateway
(`/v3/kv/put`) was tried first: 10.8k entries/s for Txns of 128 x 1 KiB, against 25.5k/s over gRPC.
etcd fsyncs its WAL before it answers (its default), as quorumlog's nodes fdatasync (flush "sync").

"C connections x K in flight" is C gRPC channels, each its own HTTP/2 connection, with K calls outstanding
on each. etcd has no batch put: a Txn of B puts is its batch (etcd's default limit is 128 operations a Txn;
the cluster runs with its default settings).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from common import free_ports, lat_summary, rate_row, stop_procs

from quorumlog.net.loop import run as run_loop


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"


def etcd_binary() -> str | None:
    """The etcd server on PATH (Debian installs it as /usr/bin/etcd), or None."""
    return shutil.which("etcd")


def etcd_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    return out.splitlines()[0].split()[-1] if out else "?"


def start_cluster(binary: str, root: Path, n: int = 3) -> list[Member]:
    """Start n members on free ports, data and logs under root; returns once all are spawned."""
    ports = free_ports(2 * n)
    members = [Member(f"m{i}", ports[i], ports[n + i], root / f"m{i}.log") for i in range(n)]
    initial = ",".join(f"{m.name}=http://127.0.0.1:{m.peer_port}" for m in members)
    try:
        for m in members:
            cmd = [binary, "--name", m.name, "--data-dir", str(root / m.name),
                   "--listen-client-urls", m.url, "--advertise-client-urls", m.url,
                   "--listen-peer-urls", f"http://127.0.0.1:{m.peer_port}",
                   "--initial-advertise-peer-urls", f"http://127.0.0.1:{m.peer_port}",
                   "--initial-cluster", initial, "--initial-cluster-state", "new",
                   "--initial-cluster-token", f"peers-{os.getpid()}", "--logger", "zap",
                   "--log-outputs", str(m.log)]
            with open(root / f"{m.name}.stderr", "wb") as err:
                m.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    except BaseException:
        stop_members(members)
        raise
    return members


def stop_members(members: list[Member]) -> None:
    stop_procs([m.proc for m in members if m.proc is not None], timeout=8.0)


def _status(m: Member) -> dict[str, Any] | None:
    req = urllib.request.Request(f"{m.url}/v3/maintenance/status", data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=1.0) as r:
            return dict(json.loads(r.read()))
    except (OSError, ValueError):
        return None


def wait_leader(members: list[Member], timeout: float = 30.0) -> Member:
    """The member every member names as leader, polled until `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            if m.proc is not None and m.proc.poll() is not None:
                raise RuntimeError(f"etcd {m.name} exited with {m.proc.returncode}; see {m.log}")
        st = [_status(m) for m in members]
        if all(s is not None for s in st):
            leaders = {s.get("leader") for s in st if s}
            if len(leaders) == 1 and "0" not in leaders:
                lead = leaders.pop()
                for m, s in zip(members, st, strict=True):
                    if s and s["header"]["member_id"] == lead:
                        return m
        time.sleep(0.1)
    raise TimeoutError(f"etcd elected no leader within {timeout:.0f} s")


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return bytes([number << 3 | 2]) + _varint(len(data)) + data


class _Load:
    """Encoded requests for puts of one payload; each put takes the next key. PutRequest is key = 1,
    value = 2; TxnRequest's `success` = 2 holds RequestOps whose `request_put` = 2 is a PutRequest."""

    def __init__(self, size: int) -> None:
        self.value = _field(2, os.urandom(size))
        self.n = 0

    def put(self) -> bytes:
        self.n += 1
        return _field(1, b"k%d" % self.n) + self.value

    def txn(self, batch: int) -> bytes:
        return b"".join(_field(2, _field(2, self.put())) for _ in range(batch))


def _channel(url: str) -> grpc.aio.Channel:
    # A local subchannel pool: channels to the same address would otherwise share one connection.
    return grpc.aio.insecure_channel(url.removeprefix("http://"), options=[("grpc.use_local_subchannel_pool", 1)])


async def throughput(url: str, size: int, seconds: float, connections: int, inflight: int,
                     batch: int) -> dict[str, Any]:
    """`inflight` calls outstanding on each of `connections` channels for `seconds`; batch > 1 sends Txns
    of `batch` puts. Entries answered after the end of the phase are not counted."""
    load = _Load(size)
    method = "/etcdserverpb.KV/Txn" if batch > 1 else "/etcdserverpb.KV/Put"
    lat: list[float] = []
    done = [0]
    errors: list[str] = []
    channels = [_channel(url) for _ in range(connections)]
    try:
        calls = [ch.unary_unary(method) for ch in channels]  # bytes in, bytes out
        await asyncio.gather(*(call(load.txn(batch) if batch > 1 else load.put(), timeout=30)
                               for call in calls))  # connect before the clock starts
        t0 = time.perf_counter()
        stop_at = t0 + seconds

        async def worker(call: Any) -> None:
            while (t := time.perf_counter()) < stop_at and len(errors) < 100:
                try:
                    await call(load.txn(batch) if batch > 1 else load.put(), timeout=30)
                except grpc.aio.AioRpcError as e:
                    errors.append(f"{e.code()}: {e.details()}")
                    continue
                now = time.perf_counter()
                if now <= stop_at:
                    lat.append(now - t)
                    done[0] += batch

        await asyncio.gather(*(worker(call) for call in calls for _ in range(inflight)))
    finally:
        for ch in channels:
            await ch.close()
    return rate_row(done[0], seconds, size, lat, batch=batch, connections=connections, inflight=inflight,
                    errors=len(errors), first_error=errors[0] if errors else None)


async def single(url: str, size: int, count: int, max_seconds: float) -> dict[str, Any]:
    """`count` puts one at a time on one channel (stopping early after `max_seconds`)."""
    load = _Load(size)
    lat: list[float] = []
    async with _channel(url) as ch:
        call = ch.unary_unary("/etcdserverpb.KV/Put")
        await call(load.put(), timeout=30)
        deadline = time.monotonic() + max_seconds
        while len(lat) < count and time.monotonic() < deadline:
            t = time.perf_counter()
            await call(load.put(), timeout=30)
            lat.append(time.perf_counter() - t)
    return {"appends": len(lat)} | lat_summary(lat)


def run(size: int, seconds: float, connections: int, inflight: int, batch: int, single_count: int,
        binary: str | None = None) -> dict[str, Any]:
    """A fresh 3-member cluster: Txn-batched throughput, single-put throughput, one-at-a-time latency.
    Every process is stopped by its pid and the temp dir removed, whatever happens."""
    binary = binary or etcd_binary()
    if binary is None:
        raise FileNotFoundError("etcd is not on PATH (Debian: apt-get install etcd-server)")
    root = Path(tempfile.mkdtemp(prefix="peers-etcd-"))
    members: list[Member] = []
    try:
        members = start_cluster(binary, root)
        leader = wait_leader(members)
        out: dict[str, Any] = {"system": "etcd", "version": etcd_version(binary), "size": size,
                               "durability": "WAL fsync before each answer (etcd's default)"}
        out["batched"] = run_loop(throughput(leader.url, size, seconds, connections, inflight, batch))
        out["batched"]["label"] = f"Txn of {batch} puts"
        out["unbatched"] = run_loop(throughput(leader.url, size, seconds, connections, inflight, 1))
        out["unbatched"]["label"] = "1 put a request"
        if single_count > 0:
            out["single"] = run_loop(single(leader.url, size, single_count, max(10.0, 3 * seconds)))
        return out
    finally:
        stop_members(members)
        shutil.rmtree(root, ignore_errors=True)
