"""Real `quorumlog serve` processes on 127.0.0.1 ephemeral ports, in temp dirs; every process is stopped
by its pid when the test ends, and every wait polls against a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from quorumlog.client import AsyncClient
from quorumlog.errors import RequestError
from quorumlog.server.cluster import LocalCluster, LocalNode

T = TypeVar("T")

# Small segments so tests roll over, expire and truncate across segment ends.
SMALL_STORE = {"data_segment_bytes": 1 << 20, "index_segment_bytes": 32 * 8192, "max_body_bytes": 64 << 10}
# Faster failure detection than the defaults keeps the suite short on a 2-core machine.
FAST_RAFT = {"heartbeat_interval_ms": 50, "max_heartbeat_leak": 6, "election_backoff_ms": 150}


class ClusterPool:
    """Local clusters under one directory, with the test settings; close() stops every one by pid."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: list[LocalCluster] = []

    def make(self, nodes: int = 3, groups: int = 1, start: bool = True, **kwargs: Any) -> LocalCluster:
        kwargs.setdefault("raft", FAST_RAFT)
        kwargs.setdefault("store", SMALL_STORE)
        c = LocalCluster(self.root / f"c{len(self.made)}", nodes, groups, **kwargs)
        self.made.append(c)
        if start:
            c.start()
        return c

    def close(self) -> None:
        for c in self.made:
            c.stop(timeout=10)


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    pool = ClusterPool(tmp_path)

    def make(nodes: int = 3, groups: int = 1, start: bool = True, **kwargs: Any) -> LocalCluster:
        kwargs.setdefault("log_level", "INFO")
        return pool.make(nodes, groups, start, **kwargs)

    try:
        yield make
    finally:
        pool.close()


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.02) -> T:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def await_until(predicate: Callable[[], Awaitable[T]], timeout: float, what: str,
                      interval: float = 0.02) -> T:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def statuses(client: AsyncClient, cluster: LocalCluster, group: str = "g0") -> dict[str, dict[str, Any]]:
    """The group status of every node that answers."""
    out: dict[str, dict[str, Any]] = {}
    for node in cluster.nodes:
        if not node.alive:
            continue
        try:
            doc = await client.node_status(node.address)
        except Exception:
            continue
        out[node.node_id] = doc["groups"][group]
    return out


async def wait_leader(client: AsyncClient, cluster: LocalCluster, timeout: float = 20.0, group: str = "g0") -> str:
    async def probe() -> str | None:
        st = await statuses(client, cluster, group)
        leaders = [nid for nid, s in st.items() if s["role"] == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    return await await_until(probe, timeout, "a single leader")


async def make_leader(client: AsyncClient, cluster: LocalCluster, node_id: str, timeout: float = 30.0) -> None:
    """Have `node_id` lead the client's group. A transfer is best effort (it fails when the target's election is
    lost or the transfer times out on a loaded machine), so this asks again until the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await wait_leader(client, cluster, timeout, client.group) != node_id:
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {node_id} to lead")
        try:
            await client.transfer_leader(node_id)
        except RequestError:  # TAKE_LEADERSHIP_FAILED, LEADER_TRANSFERRING, NOT_LEADER mid-election
            await asyncio.sleep(0.1)


def node_index(cluster: LocalCluster, node_id: str) -> int:
    return [n.node_id for n in cluster.nodes].index(node_id)


def check_store(path: Path) -> dict[str, Any]:
    """`quorumlog check-store --json` on one store directory (run as the command, as an operator would)."""
    r = subprocess.run([sys.executable, "-m", "quorumlog", "check-store", "--json", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"check-store {path} failed ({r.returncode}): {r.stdout} {r.stderr}"
    return dict(json.loads(r.stdout))


async def committed_entries(addr: str, start: int = 0, secret: str | None = None) -> list[tuple[int, bytes]]:
    """Every committed (index, body) from `start` that the node at `addr` holds, read from that node only."""
    out: list[tuple[int, bytes]] = []
    async with AsyncClient(addr, secret=secret) as reader:
        nxt = start
        while True:
            entries, after, _committed = await reader.read_batch(nxt, 5000)
            out.extend((e.index, e.body) for e in entries)
            if after <= nxt:
                return out
            nxt = after


def rss_mib(pid: int) -> float:
    """A process's resident memory in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def scrape(admin_url: str) -> dict[str, Metric]:
    """A node's /metrics, parsed by the Prometheus client's own parser: metric families by sample name
    (a counter's family is found under its `_total` name, a histogram's under each of its sample names)."""
    text = urllib.request.urlopen(admin_url + "/metrics", timeout=5).read().decode()
    out: dict[str, Metric] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = fam
        for s in fam.samples:
            out.setdefault(s.name, fam)
    return out


def metric_value(families: dict[str, Metric], name: str, **labels: str) -> float:
    """The value of the one sample `name` whose labels include `labels`."""
    fam = families.get(name)
    found = [s.value for s in fam.samples if s.name == name and labels.items() <= s.labels.items()] if fam else []
    assert len(found) == 1, f"{len(found)} samples {name}{labels} in /metrics"
    return float(found[0])


def disk_full_past(node: LocalNode, ratio: float) -> str:
    """Have `node` count its disk full once its file system is `ratio` used (its config's [store]; set
    before it starts). Returns the config it had, to write back."""
    text = node.config_path.read_text()
    node.config_path.write_text(text.replace(
        "[store]\n", f"[store]\ndisk_clean_ratio = {ratio!r}\ndisk_full_ratio = {ratio!r}\n", 1))
    return text


def tmpfs_unavailable(where: Path) -> str | None:
    """Why a tmpfs cannot be mounted here (a test's own small file system, to fill), or None."""
    try:
        with tmpfs(where, 1):
            return None
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot mount a tmpfs (needs root): {e}"


@contextlib.contextmanager
def tmpfs(path: Path, mb: int) -> Iterator[Path]:
    """A tmpfs of `mb` MiB mounted at `path` (made if missing) for the block; unmounted after it."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mb}m", "tmpfs", str(path)], check=True, capture_output=True,
                   timeout=30)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill_to_the_brim(filler: Path) -> int:
    """Allocate every block the file system at `filler` still gives (ENOSPC for anything after); the size."""
    size = shutil.disk_usage(filler.parent).free
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        while size > 0:
            try:
                os.posix_fallocate(fd, 0, size)
                return size
            except OSError:
                size -= max(size // 64, 4096)
        return 0
    finally:
        os.close(fd)


async def fill_disk(filler: Path, size: int = 512 << 20) -> None:
    """Allocate `size` bytes of the file system at `filler` (past a disk_full_past ratio), then wait past the
    nodes' next disk probe (0.1 s)."""
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    await asyncio.sleep(0.3)


def flip_bit(store: Path, pos: int, offset: int, mask: int) -> None:
    """XOR `mask` into the byte `offset` bytes into the entry at log position `pos` of the store at `store`
    (SMALL_STORE's data segments): bit rot, at rest or under a running node."""
    seg_bytes = SMALL_STORE["data_segment_bytes"]
    with open(store / "data" / f"{pos - pos % seg_bytes:020d}", "r+b") as f:
        f.seek(pos % seg_bytes + offset)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ mask]))


def pids_with(text: str) -> list[int]:
    """Processes (other than this one) whose command line contains `text`."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            with contextlib.suppress(OSError):
                if text.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                    out.append(int(d))
    return out


def kill_leftovers(proc: subprocess.Popen[Any], text: str) -> None:
    """After a test of a command that starts processes: kill it if it still runs, and every process whose
    command line contains `text` (its temp dir), whatever the test found."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    for p in pids_with(text):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


@pytest.fixture
def netns_cluster(tmp_path: Path) -> Iterator[Callable[..., tuple[Any, Any]]]:
    """make(**cluster settings): three nodes in namespaces of their own (tests/server/netns.py; the test still
    reaches each over the bridge), with the cluster secret; every cluster made is stopped and its namespaces
    removed at the end. Skipped where namespaces cannot be made (not root, no iproute2)."""
    from .netns import NODES, NetnsCluster, Network, unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    made: list[tuple[Any, Any]] = []

    def make(**kwargs: Any) -> tuple[Any, Any]:
        net = Network()
        made.append((None, net))
        try:
            net.create()
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot build the namespaces: `{' '.join(e.cmd)}` failed: {e.stderr.strip()}")
        kwargs.setdefault("raft", FAST_RAFT)
        c = NetnsCluster(tmp_path / f"c{len(made)}", NODES, 1, secret=os.urandom(18).hex(), log_level="INFO",
                         store=SMALL_STORE, hosts=[net.host(i) for i in range(NODES)], namespaces=net.nodes, **kwargs)
        made[-1] = (c, net)
        c.start()
        return c, net

    try:
        yield make
    finally:
        for c, net in made:
            if c is not None:
                c.stop(timeout=15)
            net.destroy()
