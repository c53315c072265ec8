"""Primary/backup replication (RocketMQ master/slave HA with epochs) on real `quorumlog serve` processes.

Every test runs a three-node group n0..n2 with `replication = "primary-backup"` and n0 the primary of
epoch 1, over 127.0.0.1 in temp dirs; every process is stopped by its pid through the cluster fixture,
every wait is bounded by a deadline. Covered: a manual failover under load with SYNC acks (nothing
acknowledged is lost or doubled) and with ASYNC acks (what is lost is measured, and the loss ASYNC
allows is made certain once), a promotion refused for a backup behind the live primary unless forced,
a paused backup that catches up, a wiped backup that streams from 0, bogus
acks from a fake backup, SLAVE_NOT_AVAILABLE, and the old primary fenced by the new epoch; last, the store
race a backup's log cut had with the worker thread's checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

from quorumlog.client import AsyncClient, Client
from quorumlog.config import StoreConfig
from quorumlog.errors import BackupUnavailableError, PromoteError, QuorumLogError, ResponseCode
from quorumlog.ha.epochs import promotion_epoch
from quorumlog.ha.messages import HaHandshake, HaReport
from quorumlog.net.connection import Connection, connect
from quorumlog.net.errors import ResponseError
from quorumlog.net.ops import Op as WireOp
from quorumlog.net.schemas import APPEND_REQUEST, APPEND_RESPONSE
from quorumlog.raft.member import members_digest
from quorumlog.server.cluster import LocalCluster
from quorumlog.server.codec import HA_MESSAGES, encode_message
from quorumlog.server.store import NodeStore

from .conftest import SMALL_STORE, await_until, committed_entries, disk_full_past, node_index

# Small HA timings: a backup silent for a second leaves the in-sync set.
HA_FAST = {"ha_heartbeat_interval_ms": 200, "ha_ack_timeout_ms": 1000}
BACKUPS = ("n1", "n2")
MEMBERS = ["n0", "n1", "n2"]
N1_EPOCH = promotion_epoch(1, MEMBERS, "n1")  # what `promote` starts when n1 takes over from epoch 1


def pb_cluster(factory: Any, ack: str = "sync", **ha: Any) -> LocalCluster:
    cluster: LocalCluster = factory(replication="primary-backup", ha={"ack": ack, **HA_FAST, **ha})
    return cluster


async def group_status(c: AsyncClient, cluster: LocalCluster, node_id: str) -> dict[str, Any] | None:
    """The g0 status of one node, None when it does not answer (down, paused, starting)."""
    node = cluster.nodes[node_index(cluster, node_id)]
    if not node.alive:
        return None
    try:
        doc = await c.node_status(node.address)
    except (QuorumLogError, OSError):
        return None
    return dict(doc["groups"]["g0"])


async def wait_primary(c: AsyncClient, cluster: LocalCluster, primary: str, in_sync: tuple[str, ...],
                       epoch: int | None = None, timeout: float = 20.0) -> dict[str, Any]:
    """Wait until `primary` is the confirmed primary (of `epoch`) with exactly `in_sync` in sync."""
    async def probe() -> dict[str, Any] | None:
        st = await group_status(c, cluster, primary)
        if st is None or st["role"] != "leader" or not st["confirmed"]:
            return None
        if epoch is not None and st["epoch"] != epoch:
            return None
        return st if list(st["in_sync_effective"]) == sorted(in_sync) else None

    return await await_until(probe, timeout, f"{primary} primary with in-sync set {sorted(in_sync)}", 0.05)


async def wait_converged(c: AsyncClient, cluster: LocalCluster, primary: str, backups: tuple[str, ...],
                         timeout: float = 20.0) -> dict[str, dict[str, Any]]:
    """Wait until every backup holds and knows committed all the primary holds (nothing in flight)."""
    last: list[Any] = [None]

    async def probe() -> dict[str, dict[str, Any]] | None:
        docs = {n: await group_status(c, cluster, n) for n in (primary, *backups)}
        last[0] = docs
        p = docs[primary]
        if p is None or p["committed_index"] != p["end_index"] or p["pending_appends"]:
            return None
        for b in backups:
            d = docs[b]
            if d is None or d["role"] != "follower" or d["epoch"] != p["epoch"] or not d.get("streaming"):
                return None
            if (d["end_index"], d["committed_index"]) != (p["end_index"], p["committed_index"]):
                return None
            if p["backup_offsets"].get(b) != max(p["backup_offsets"].values()):
                return None
        return docs  # type: ignore[return-value]

    try:
        return await await_until(probe, timeout, f"{backups} converged on {primary}", 0.05)
    except AssertionError as e:
        raise AssertionError(f"{e}; last statuses: {last[0]}") from None


async def raw_log(addr: str) -> bytes:
    """The committed entries of the node at `addr` exactly as it stores them (read from that node only)."""
    out = bytearray()
    async with AsyncClient(addr) as reader:
        nxt = 0
        while True:
            data, after, _committed = await reader.read_raw(nxt, 5000, 4 << 20, node=addr)
            out += data
            if after <= nxt:
                return bytes(out)
            nxt = after


async def bodies_of(addr: str) -> list[tuple[int, bytes]]:
    return [(i, b) for i, b in await committed_entries(addr) if b]


async def promote_most_up_to_date(c: AsyncClient, cluster: LocalCluster) -> tuple[str, int]:
    """Once the backups' logs stopped growing (the dead primary's last frames are written), promote the
    most up-to-date one (by last epoch, then last index) with the client's promote."""
    seen: list[Any] = [None]

    async def settled() -> dict[str, tuple[int, int]] | None:
        docs = {b: await group_status(c, cluster, b) for b in BACKUPS}
        ends = {b: (d["last_epoch"], d["end_index"]) for b, d in docs.items() if d is not None}
        stable = ends == seen[0] and len(ends) == len(BACKUPS)
        seen[0] = ends
        return ends if stable else None

    ends = await await_until(settled, 10, "the backups' logs to stop growing", 0.1)
    target = max(ends, key=lambda b: ends[b])
    return await c.promote(target)


# -- the history of a failover under load ----------------------------------------------------------
@dataclass(slots=True)
class Append:
    body: bytes
    index: int | None = None  # the index the append was acknowledged at (SUCCESS)
    error: str | None = None


@dataclass(slots=True)
class Failover:
    ops: list[Append]
    retries: int  # requests the writers' clients sent again (redirects, lost connections, duplicates)
    new_primary: str
    epoch: int
    logs: dict[str, list[tuple[int, bytes]]]  # the surviving replicas' committed logs
    deduplicated: int  # retried appends the new primary answered with the entries it already held

    @property
    def acked(self) -> list[Append]:
        return [op for op in self.ops if op.index is not None]


def check_exactly_once(f: Failover) -> list[Append]:
    """What must hold in either ack mode; returns the acknowledged appends missing from the new log."""
    primary_log = f.logs[f.new_primary]
    for node, log in f.logs.items():
        assert log == primary_log, f"{node}'s committed log differs from {f.new_primary}'s"
    where: dict[bytes, int] = {}
    for index, body in primary_log:
        assert body not in where, f"{body!r} written twice: at {where[body]} and {index}"
        where[body] = index
    sent = {op.body for op in f.ops}
    phantoms = [b for b in where if b not in sent]
    assert not phantoms, f"{len(phantoms)} entries no client sent, first {phantoms[:3]}"
    for op in f.acked:  # the epoch-1 part of the new primary's log is a prefix of the old primary's
        if op.body in where:
            assert where[op.body] == op.index, f"{op.body!r} acknowledged at {op.index}, log has it at {where[op.body]}"
    return [op for op in f.acked if op.body not in where]


CLIENTS = 4
TASKS_PER_CLIENT = 2
PER_PHASE = 600  # appends acknowledged before the kill, and again after the promotion


async def failover_under_load(cluster: LocalCluster, retry_timeout: float) -> Failover:
    """Idempotent writers append while the primary n0 is SIGKILLed; the most up-to-date backup is promoted
    with the client's promote and the writers go on; then the surviving replicas' committed logs."""
    ops: list[Append] = []
    stop = asyncio.Event()

    async def writer(c: AsyncClient, name: str) -> None:
        n = 0
        while not stop.is_set():
            op = Append(f"{name}-{n}".encode() + b"." * 64)
            n += 1
            ops.append(op)
            try:
                op.index = (await c.append(op.body)).index
            except QuorumLogError as e:
                op.error = f"{type(e).__name__}: {e}"

    def acked() -> int:
        return sum(op.index is not None for op in ops)

    async with AsyncClient(cluster.endpoints, retry_timeout=10) as admin:
        await wait_primary(admin, cluster, "n0", BACKUPS)
        clients = [AsyncClient(cluster.endpoints, retry_timeout=retry_timeout) for _ in range(CLIENTS)]
        tasks = [asyncio.create_task(writer(c, f"c{k}t{t}")) for k, c in enumerate(clients)
                 for t in range(TASKS_PER_CLIENT)]
        try:
            await await_until(lambda: _true(acked() >= PER_PHASE), 30, f"{PER_PHASE} appends acknowledged by n0")
            cluster.kill(0, signal.SIGKILL)
            before = acked()
            target, epoch = await promote_most_up_to_date(admin, cluster)
            assert epoch == promotion_epoch(1, MEMBERS, target)
            await await_until(lambda: _true(acked() >= before + PER_PHASE), 30,
                              f"{PER_PHASE} appends acknowledged by {target}")
        finally:
            stop.set()
            done, pending = await asyncio.wait(tasks, timeout=retry_timeout + 10)
            for t in pending:
                t.cancel()
            retries = sum(c.retries for c in clients)
            for c in clients:
                await c.close()
        assert not pending, f"{len(pending)} writers did not finish"
        for t in done:
            t.result()
        other = next(b for b in BACKUPS if b != target)
        await wait_converged(admin, cluster, target, (other,))
        logs = {n: await bodies_of(cluster.nodes[node_index(cluster, n)].address) for n in BACKUPS}
    metrics = urllib.request.urlopen(cluster.nodes[node_index(cluster, target)].admin_url + "/metrics",
                                     timeout=5).read().decode()
    dedup = sum(int(float(line.rsplit(" ", 1)[1])) for line in metrics.splitlines()
                if line.startswith("quorumlog_deduplicated_appends_total{"))
    return Failover(ops, retries, target, epoch, logs, dedup)


async def _true(value: bool) -> bool:
    return value


@pytest.mark.smoke
def test_sync_failover_under_load_loses_and_doubles_nothing(cluster_factory: Any) -> None:
    """SYNC: an append is answered SUCCESS only once every in-sync backup holds it durably, so the most
    up-to-date backup, promoted by hand after the primary's SIGKILL, holds every acknowledged append; the
    idempotent writers' retries of the appends in flight land once."""
    cluster = pb_cluster(cluster_factory, "sync")
    f = asyncio.run(failover_under_load(cluster, retry_timeout=20))
    lost = check_exactly_once(f)
    assert not lost, f"{len(lost)} acknowledged appends lost, first {[op.body for op in lost[:3]]}"
    errors = [op.error for op in f.ops if op.error is not None]
    assert not errors, errors[:5]
    assert len(f.acked) >= 2 * PER_PHASE
    with Client(cluster.nodes[node_index(cluster, f.new_primary)].address) as reader:
        epochs = {e.term for e in reader.read(0, 10**9)}
    assert epochs == {1, f.epoch}, epochs
    print(f"SYNC failover: {len(f.ops)} appends, {len(f.acked)} acknowledged, 0 lost, {f.retries} retries, "
          f"{f.deduplicated} retries answered as duplicates, new primary {f.new_primary} epoch {f.epoch}")


def test_async_failover_under_load_measures_what_is_lost(cluster_factory: Any) -> None:
    """ASYNC: an append is answered SUCCESS once it is durable on the primary alone; backups are streamed
    behind it. So an ASYNC group can lose acknowledged appends: those not yet streamed to the backup
    promoted when the primary dies for good, or whose disk is lost (here the dead primary's copy is
    also cut away when it rejoins, as its tail is not in the new epoch). With SIGKILL on one machine
    the figure is usually 0, since streaming trails the local flush by very little; it is printed, not
    asserted. What must hold all the same: nothing is written twice or from nowhere, an acknowledged
    append that survived is at its acknowledged index, and the surviving replicas' logs agree."""
    cluster = pb_cluster(cluster_factory, "async")
    f = asyncio.run(failover_under_load(cluster, retry_timeout=10))
    lost = check_exactly_once(f)
    failed = sum(op.error is not None for op in f.ops)
    print(f"ASYNC failover: {len(f.ops)} appends, {len(f.acked)} acknowledged, {len(lost)} acknowledged "
          f"appends lost ({100 * len(lost) / max(1, len(f.acked)):.2f}%), {failed} failed, {f.retries} retries, "
          f"{f.deduplicated} retries answered as duplicates, "
          f"new primary {f.new_primary} epoch {f.epoch}")
    assert len(f.acked) >= 2 * PER_PHASE


def test_async_acknowledges_what_no_backup_holds_and_a_promotion_loses_it(cluster_factory: Any) -> None:
    """The loss ASYNC allows, made certain: both backups are down, so n0 acknowledges appends it alone
    holds; n0 then dies for good (as far as the promotion knows) and n1 is promoted. Those appends are
    gone from the group, and when n0 returns its epoch-1 tail is cut to the agreed point: every replica
    ends with the same log, without them.

    The idempotent client that was told of the lost appends finds its next sequence refused by the new
    primary (OUT_OF_ORDER_SEQUENCE: the earlier ones are not in its log); it gives up that request after
    its retry_timeout (SequenceError) and continues under a new producer id."""
    cluster = pb_cluster(cluster_factory, "async")

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c, \
                AsyncClient(cluster.endpoints, retry_timeout=2) as told:
            await wait_primary(c, cluster, "n0", BACKUPS)
            await _append_many(c, "streamed", 200)
            await wait_converged(c, cluster, "n0", BACKUPS)
            cluster.kill(1, signal.SIGKILL)
            cluster.kill(2, signal.SIGKILL)
            lost = [await told.append(f"only-on-n0-{i}".encode()) for i in range(20)]
            assert [r.index for r in lost] == list(range(200, 220))  # acknowledged: committed on n0
            cluster.kill(0, signal.SIGKILL)
            cluster.start(1)
            cluster.start(2)

            async def backups_up() -> bool:
                return all([await group_status(c, cluster, b) is not None for b in BACKUPS])

            await await_until(backups_up, 20, "n1 and n2 back")
            assert await c.promote("n1") == ("n1", N1_EPOCH)
            await wait_primary(c, cluster, "n1", ("n2",), epoch=N1_EPOCH)
            r = await c.append(b"epoch-2")
            assert (r.index, r.term) == (200, N1_EPOCH)  # where the first lost append was acknowledged
            try:
                await told.append(b"told-next")
                next_outcome = "SUCCESS"
            except QuorumLogError as e:
                next_outcome = type(e).__name__
            assert (await told.append(b"told-after")).term == N1_EPOCH
            cluster.start(0)
            await wait_converged(c, cluster, "n1", ("n0", "n2"), timeout=30)
            logs = [await raw_log(n.address) for n in cluster.nodes]
            assert logs[0] == logs[1] == logs[2]
            bodies = [b for _, b in await bodies_of(cluster.nodes[0].address)]
            assert bodies[200] == b"epoch-2" and bodies[-1] == b"told-after"
            assert not any(b.startswith(b"only-on-n0") for b in bodies)
            assert bodies.count(b"told-next") == (next_outcome == "SUCCESS")
            print(f"ASYNC with no backup streaming: {len(lost)} acknowledged appends lost by the promotion; "
                  f"the told client's next append: {next_outcome}")

    asyncio.run(main())


def test_promote_refuses_a_backup_behind_the_live_primary_unless_forced(cluster_factory: Any) -> None:
    """ASYNC: n0 acknowledges appends at its own flush. n1 and n2 count their disks full from the start
    (disk_full_ratio far below their use), so they answer status but store nothing they are streamed: both
    stay empty while n0, alive, acknowledged entries. Promoting n1 would cut those, so without --force
    the client and the CLI refuse, naming n0 (not n2, which is no further than n1) and --force, and nothing
    changes. (The client once compared backups only, skipping the live primary, and promoted n1.) With
    --force n1 leads a new epoch, and n0 follows it with its acknowledged entries cut: the loss accepted.
    Then n0 is promoted back without --force while n1 is live: it lacks nothing n1 acknowledged."""
    cluster: LocalCluster = cluster_factory(replication="primary-backup", ha={"ack": "async", **HA_FAST},
                                            start=False)
    for n in cluster.nodes[1:]:
        disk_full_past(n, 0.0001)
    cluster.start()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            async def confirmed() -> bool:
                st = await group_status(c, cluster, "n0")
                return st is not None and st["role"] == "leader" and st["confirmed"]

            await await_until(confirmed, 20, "n0 the confirmed primary", 0.05)
            async def answered(n: str) -> dict[str, Any]:  # (a status may time out on a loaded machine)
                return await await_until(lambda: group_status(c, cluster, n), 10, f"{n}'s status", 0.05)

            await _append_many(c, "acked", 5, batch=5)
            docs = {n: await answered(n) for n in MEMBERS}
            assert [d["end_index"] for d in docs.values()] == [4, -1, -1], docs

            with pytest.raises(PromoteError) as refused:
                await c.promote("n1")
            message = str(refused.value)
            assert "n0" in message and "primary" in message and "--force" in message, message
            assert "n2" not in message, message
            cli = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "quorumlog", "promote", "--endpoints", cluster.endpoints,
                                 "--group", "g0", "--to", "n1"], capture_output=True, text=True, timeout=30)
            assert cli.returncode == 2 and not cli.stdout, (cli.stdout, cli.stderr)
            assert len(cli.stderr.splitlines()) == 1 and "n0" in cli.stderr and "--force" in cli.stderr, cli.stderr
            for n, role in (("n0", "leader"), ("n1", "follower")):
                st = await answered(n)
                assert (st["role"], st["epoch"]) == (role, 1), st

            assert await c.promote("n1", force=True) == ("n1", N1_EPOCH)

            async def n0_follows() -> dict[str, Any] | None:
                st = await group_status(c, cluster, "n0")
                ok = st is not None and (st["role"], st["epoch"], st["primary"], st["end_index"]) == (
                    "follower", N1_EPOCH, "n1", -1)
                return st if ok else None

            await await_until(n0_follows, 10, "n0 following n1, its acknowledged entries cut", 0.05)
            # A live primary alone is no reason to refuse: n1 acknowledged nothing n0 lacks.
            assert await c.promote("n0") == ("n0", promotion_epoch(N1_EPOCH, MEMBERS, "n0"))

    asyncio.run(main())


@pytest.mark.smoke
def test_a_primary_backup_group_speaks_of_primaries_backups_and_epochs(cluster_factory: Any) -> None:
    """Its log lines and events say primary, backup and epoch (they said "follower in term 1"); a leadership
    transfer, which it has no use for, is refused naming `promote`, and records no transfer events."""
    cluster = pb_cluster(cluster_factory)
    with Client(cluster.endpoints) as c:
        c.append(b"x")
        r = subprocess.run([sys.executable, "-m", "quorumlog", "transfer-leader", "--endpoints", cluster.endpoints,
                            "--to", "n1"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, r.stderr
        assert "UNSUPPORTED: group g0 is a primary/backup group: use promote (quorumlog promote --group g0 --to n1)" \
            in r.stderr, r.stderr
        assert c.promote("n1") == ("n1", N1_EPOCH)
        c.append(b"y")
    logs = {n.node_id: n.log_path.read_text() for n in cluster.nodes}
    assert f"group g0: backup in epoch {N1_EPOCH}, primary n1" in logs["n0"], logs["n0"]
    assert f"group g0: primary in epoch {N1_EPOCH}, primary n1" in logs["n1"], logs["n1"]
    for n, text in logs.items():
        assert not re.search(r"group g0: \w+ in term|leader n\d", text), (n, text)
    texts = {}
    for n in ("n0", "n1"):
        doc = json.loads(urllib.request.urlopen(cluster.nodes[node_index(cluster, n)].admin_url + "/status",
                                                timeout=5).read())
        texts[n] = [e["text"] for e in doc["events"] if e["group"] == "g0"]
        assert not any("term" in t or "leader" in t for t in texts[n]), texts
    assert f"backup in epoch {N1_EPOCH}, primary n1" in texts["n0"], texts
    assert f"became primary in epoch {N1_EPOCH}" in texts["n1"], texts


# -- a backup behind, a backup wiped -----------------------------------------------------------------
async def _append_many(c: AsyncClient, prefix: str, count: int, size: int = 100, batch: int = 100) -> None:
    for k in range(0, count, batch):
        await c.append_many([f"{prefix}-{i}".encode().ljust(size, b".") for i in range(k, min(count, k + batch))])


def test_paused_backup_falls_behind_catches_up_and_rejoins_the_in_sync_set(cluster_factory: Any) -> None:
    """A SIGSTOPped backup leaves the in-sync set after ha_ack_timeout_ms (the group keeps committing with
    the other), and after SIGCONT it streams what it missed, converges and is in sync again."""
    cluster = pb_cluster(cluster_factory, "sync")
    n2 = cluster.nodes[2].proc
    assert n2 is not None

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            await wait_primary(c, cluster, "n0", BACKUPS)
            await _append_many(c, "before", 300)
            n2.send_signal(signal.SIGSTOP)
            try:
                load = asyncio.create_task(_append_many(c, "paused", 2000, batch=50))
                st = await wait_primary(c, cluster, "n0", ("n1",))
                assert list(st["in_sync"]) == ["n1"]
                await load
                st = await group_status(c, cluster, "n0")
                assert st is not None
                assert st["backup_offsets"]["n2"] < st["backup_offsets"]["n1"], st["backup_offsets"]
            finally:
                n2.send_signal(signal.SIGCONT)
            load = asyncio.create_task(_append_many(c, "resumed", 1000, batch=20))
            await wait_primary(c, cluster, "n0", BACKUPS)  # back in sync while appends go on
            await load
            docs = await wait_converged(c, cluster, "n0", BACKUPS)
            offsets = docs["n0"]["backup_offsets"]
            assert offsets["n1"] == offsets["n2"], offsets
            assert list(docs["n0"]["in_sync"]) == ["n1", "n2"]
            logs = [await raw_log(n.address) for n in cluster.nodes]
            assert logs[0] == logs[1] == logs[2]
            assert len(await bodies_of(cluster.nodes[2].address)) == 3300

    asyncio.run(main())


def test_backup_with_a_full_disk_leaves_the_in_sync_set_and_rejoins_once_it_has_space(cluster_factory: Any) -> None:
    """n1 counts its disk full (disk_full_ratio far below its use): it refuses the frames it is streamed,
    goes quiet and leaves the in-sync set, so SYNC appends go on with n2 and none waits for n1; n1 stays
    up, says why in its status, and no exception leaves its replication core (one did: the write raised
    out of it). Restarted with space, it streams what it missed and is in sync again."""
    cluster: LocalCluster = cluster_factory(replication="primary-backup", ha={"ack": "sync", **HA_FAST},
                                            start=False)
    n1 = cluster.nodes[1]
    normal = disk_full_past(n1, 0.0001)
    cluster.start()

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            await wait_primary(c, cluster, "n0", BACKUPS)  # (n1 stores nothing yet: nothing was written)
            await _append_many(c, "first", 10, batch=10)  # acked by n2; refused by n1's disk
            await wait_primary(c, cluster, "n0", ("n2",))
            t0 = time.monotonic()
            await _append_many(c, "n1 full", 300, batch=10)
            assert time.monotonic() - t0 < 10  # none of the 30 waited out max_wait_ack_ms for n1
            st = await group_status(c, cluster, "n1")
            assert st is not None and "disk_full_ratio" in st.get("last_frame_error", ""), st
            assert n1.alive
            assert "failed (" not in n1.log_path.read_text()  # no core error: nothing raised out of it
            cluster.kill(1, signal.SIGTERM)
            n1.config_path.write_text(normal)
            cluster.start(1)
            await wait_primary(c, cluster, "n0", BACKUPS)
            docs = await wait_converged(c, cluster, "n0", BACKUPS)
            assert docs["n1"]["end_index"] == docs["n0"]["end_index"]
            logs = [await raw_log(n.address) for n in cluster.nodes]
            assert logs[0] == logs[1] == logs[2]

    asyncio.run(main())


def test_wiped_backup_streams_from_zero_and_ends_byte_identical(cluster_factory: Any) -> None:
    """A backup whose store is deleted restarts empty, handshakes with no epochs, is streamed the whole log
    from index 0 (several segments) and ends with the same bytes as the primary."""
    cluster = pb_cluster(cluster_factory, "sync")

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            await wait_primary(c, cluster, "n0", BACKUPS)
            await _append_many(c, "old", 2500, size=1000)  # > 2 data segments of 1 MiB
            await wait_converged(c, cluster, "n0", BACKUPS)
            assert cluster.kill(2, signal.SIGTERM) == 0
            shutil.rmtree(cluster.nodes[2].data_dir / "g0")
            await _append_many(c, "while-down", 300, size=1000)
            cluster.start(2)
            await wait_primary(c, cluster, "n0", BACKUPS, timeout=30)
            await _append_many(c, "after", 300, size=1000)
            docs = await wait_converged(c, cluster, "n0", BACKUPS, timeout=30)
            assert docs["n2"]["begin_index"] == docs["n0"]["begin_index"] == 0
            primary, wiped = await raw_log(cluster.nodes[0].address), await raw_log(cluster.nodes[2].address)
            assert len(primary) > 3 << 20
            assert wiped == primary
            st = await group_status(c, cluster, "n0")
            assert st is not None and not st["refused_reports"], st["refused_reports"]

    asyncio.run(main())


# -- a fake backup's bogus acks, SLAVE_NOT_AVAILABLE ---------------------------------------------------
class FakeBackup:
    """A raw peer connection to the primary that claims to be backup `node_id` (HELLO with its id and the
    group's members digest), sending HA frames encoded as the nodes encode them."""

    def __init__(self, conn: Connection, node_id: str, primary: str) -> None:
        self.conn = conn
        self.node_id = node_id
        self.primary = primary

    @classmethod
    async def open(cls, cluster: LocalCluster, node_id: str, primary: str) -> FakeBackup:
        node = cluster.nodes[node_index(cluster, primary)]
        digest = members_digest("g0", [n.node_id for n in cluster.nodes])
        conn = await connect("127.0.0.1", node.port, cluster="quorumlog", node_id=node_id, groups={"g0": digest})
        return cls(conn, node_id, primary)

    def send(self, m: Any) -> None:
        assert isinstance(m, HA_MESSAGES)
        op, direction, body = encode_message(m)
        self.conn.send(op, body, direction)

    def handshake(self, epoch: int = 1) -> None:
        """An empty log: the primary agrees on nothing and expects the report of offset 0."""
        self.send(HaHandshake("g0", self.node_id, self.primary, epoch, self.primary, 0, -1, b""))

    def report(self, offset: int, epoch: int = 1) -> None:
        self.send(HaReport("g0", self.node_id, self.primary, epoch, self.primary, offset))


def test_bogus_backup_offsets_are_refused_and_never_commit_a_sync_append(cluster_factory: Any) -> None:
    """With min_in_sync = 2 and the real n2 down, a SYNC append needs n2 back. A raw connection posing as
    n2 handshakes and then reports offsets the primary never sent (beyond everything; inside an entry;
    beyond the frames streamed to it): each is refused and listed in refused_reports, n2 does not rejoin
    the in-sync set, a SYNC append is still refused (SLAVE_NOT_AVAILABLE) with nothing written, and the
    primary stays up and takes the real n2 back."""
    cluster = pb_cluster(cluster_factory, "sync", min_in_sync=2)

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            await wait_primary(c, cluster, "n0", BACKUPS)
            await _append_many(c, "real", 200)
            cluster.kill(2, signal.SIGKILL)
            before = await wait_primary(c, cluster, "n0", ("n1",))

            fake = await FakeBackup.open(cluster, "n2", "n0")

            async def refusals(count: int) -> list[str] | None:
                st = await group_status(c, cluster, "n0")
                assert st is not None
                mine = [r for r in st["refused_reports"] if r.startswith("n2: ")]
                return mine if len(mine) >= count else None

            try:
                fake.handshake()
                fake.report(1 << 40)  # beyond anything, as the report that should start the stream
                got = await await_until(lambda: refusals(1), 10, "the first bogus report refused")
                assert f"offset {1 << 40} after the handshake, expected 0" in got[0], got
                fake.handshake()
                fake.report(0)  # the agreed point: accepted, n0 streams to "n2" (frames that go nowhere)
                fake.report(7)  # inside the first entry: no frame boundary
                got = await await_until(lambda: refusals(2), 10, "the report inside an entry refused")
                assert "reported offset 7, which is no frame boundary" in got[1], got
                fake.handshake()
                fake.report(0)
                fake.report(1 << 40)  # beyond the frames sent to it
                got = await await_until(lambda: refusals(3), 10, "the report beyond the frames refused")
                assert f"reported offset {1 << 40}, which is no frame boundary" in got[2], got
                await asyncio.sleep(0.5)  # ticks that would let a trusted "n2" back into the in-sync set
                st = await group_status(c, cluster, "n0")
                assert st is not None
                assert list(st["in_sync_effective"]) == ["n1"], st
                assert st["backup_offsets"]["n2"] <= before["backup_offsets"]["n2"], st["backup_offsets"]
                async with AsyncClient(cluster.endpoints, retry_timeout=1.5) as short:
                    with pytest.raises(BackupUnavailableError) as refused:
                        await short.append(b"must-not-commit")
                assert refused.value.code == ResponseCode.SLAVE_NOT_AVAILABLE
                st = await group_status(c, cluster, "n0")
                assert st is not None
                assert (st["end_index"], st["committed_index"]) == (before["end_index"], before["committed_index"])
                assert fake.conn.is_established  # a refused report does not close the connection
            finally:
                fake.conn.close("test done")
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(fake.conn.wait_closed(), 5)

            assert cluster.nodes[0].alive
            cluster.start(2)
            await wait_primary(c, cluster, "n0", BACKUPS, timeout=30)
            r = await c.append(b"after-the-real-n2-returned")
            docs = await wait_converged(c, cluster, "n0", BACKUPS)
            assert docs["n0"]["end_index"] == r.index
            bodies = [b for _, b in await bodies_of(cluster.nodes[2].address)]
            assert b"must-not-commit" not in bodies and bodies[-1] == b"after-the-real-n2-returned"

    asyncio.run(main())


def test_sync_append_without_backups_is_refused_with_slave_not_available(cluster_factory: Any) -> None:
    """ack = sync, min_in_sync = 1: with both backups killed, once they are out of the in-sync set
    (ha_ack_timeout_ms) an append is refused SLAVE_NOT_AVAILABLE (BackupUnavailableError) before anything
    is written: the primary's log does not grow."""
    cluster = pb_cluster(cluster_factory, "sync", min_in_sync=1, ha_ack_timeout_ms=500)

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            await wait_primary(c, cluster, "n0", BACKUPS)
            await _append_many(c, "ok", 100)
            await wait_converged(c, cluster, "n0", BACKUPS)
            cluster.kill(1, signal.SIGKILL)
            cluster.kill(2, signal.SIGKILL)
            before = await wait_primary(c, cluster, "n0", ())
            for idempotent in (True, False):
                async with AsyncClient(cluster.endpoints, retry_timeout=1.0, idempotent=idempotent) as short:
                    with pytest.raises(BackupUnavailableError) as refused:
                        await short.append(f"refused-{idempotent}".encode())
                    assert refused.value.code == ResponseCode.SLAVE_NOT_AVAILABLE
                    with pytest.raises(BackupUnavailableError):
                        await short.append_many([b"refused-batch-1", b"refused-batch-2"])
            st = await group_status(c, cluster, "n0")
            assert st is not None and st["role"] == "leader" and not st["in_sync_effective"]
            assert (st["end_index"], st["committed_index"]) == (before["end_index"], before["committed_index"])
            bodies = [b for _, b in await bodies_of(cluster.nodes[0].address)]
            assert len(bodies) == 100 and not any(b.startswith(b"refused") for b in bodies)

    asyncio.run(main())


# -- the old primary ---------------------------------------------------------------------------------
def test_old_primary_returns_fenced_as_a_backup_of_the_new_epoch(cluster_factory: Any) -> None:
    """n0 holds an entry no backup has (written while both backups were down, before it could be acked)
    when it is killed. n1 is promoted (a new epoch) and takes appends. The restarted n0 believes itself the
    unconfirmed primary of epoch 1, learns the new epoch from the others, and becomes n1's backup: no append sent
    to it is ever written there as primary, its unreplicated epoch-1 tail is cut at the agreed point, and
    its log converges to n1's byte for byte."""
    cluster = pb_cluster(cluster_factory, "sync")
    n0, n1 = cluster.nodes[0], cluster.nodes[1]

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            await wait_primary(c, cluster, "n0", BACKUPS)
            await _append_many(c, "epoch1", 300)
            docs = await wait_converged(c, cluster, "n0", BACKUPS)
            end1 = docs["n0"]["end_index"]
            cluster.kill(1, signal.SIGKILL)
            cluster.kill(2, signal.SIGKILL)
            # Sent at once, inside ha_ack_timeout_ms: written and flushed on n0, never acked by a backup.
            orphan = await connect("127.0.0.1", n0.port, cluster="quorumlog")
            pending = orphan.send_request(WireOp.APPEND, APPEND_REQUEST.encode("g0", b"orphan"), timeout=30)
            pending.add_done_callback(lambda f: f.cancelled() or f.exception())

            async def orphan_written() -> bool:
                st = await group_status(c, cluster, "n0")
                return st is not None and st["durable_index"] == end1 + 1

            await await_until(orphan_written, 10, "the orphan entry durable on n0")
            cluster.kill(0, signal.SIGKILL)
            assert not pending.done() or pending.exception() is not None  # never answered SUCCESS
            orphan.abort("n0 killed")
            cluster.start(1)
            cluster.start(2)

            async def backups_up() -> dict[str, dict[str, Any]] | None:
                d = {b: await group_status(c, cluster, b) for b in BACKUPS}
                return d if all(x is not None for x in d.values()) else None  # type: ignore[return-value]

            docs = await await_until(backups_up, 20, "n1 and n2 back")
            assert all(d["end_index"] == end1 and d["epoch"] == 1 for d in docs.values()), docs
            assert await c.promote("n1") == ("n1", N1_EPOCH)
            await wait_primary(c, cluster, "n1", ("n2",), epoch=N1_EPOCH)
            await _append_many(c, "epoch2", 300)

            # n0 comes back; every append sent to it alone is refused until (and after) it follows n1.
            cluster.start(0)
            answers: list[str] = []
            async with AsyncClient(n0.address) as only_n0:
                async def fenced() -> bool:
                    try:
                        await only_n0._call(n0.address, WireOp.APPEND, APPEND_REQUEST.encode("g0", b"to-old-primary"),
                                            APPEND_RESPONSE)
                        answers.append("SUCCESS")
                    except ResponseError as e:
                        answers.append(ResponseCode(e.code).name)
                        if e.code == ResponseCode.NOT_LEADER:
                            return e.leader == "n1"
                    except (QuorumLogError, OSError):
                        pass  # still starting
                    return False

                await await_until(fenced, 30, "n0 redirecting appends to n1", 0.01)
                assert "SUCCESS" not in answers, answers
                assert set(answers) <= {"LEADER_NOT_READY", "NOT_LEADER"}, answers
                st = await group_status(c, cluster, "n0")
                assert st is not None
                assert (st["role"], st["epoch"], st["primary"]) == ("follower", N1_EPOCH, "n1"), st
                # The client sent to n0 alone follows the redirect: written by n1, in its epoch.
                r = await only_n0.append(b"redirected-to-n1")
                assert r.term == N1_EPOCH

            docs = await wait_converged(c, cluster, "n1", ("n0", "n2"), timeout=30)
            assert docs["n0"]["last_epoch"] == N1_EPOCH
            logs = [await raw_log(n.address) for n in cluster.nodes]
            assert logs[0] == logs[1] == logs[2]
            bodies = [b for _, b in await bodies_of(n1.address)]
            assert b"orphan" not in bodies and b"to-old-primary" not in bodies
            assert bodies[-1] == b"redirected-to-n1" and len(bodies) == 601

    asyncio.run(main())


def test_backup_log_cut_is_serialised_with_the_worker_threads_checkpoint(tmp_path: Any) -> None:
    """A backup cuts its log (discard_after: a handshake's agreed point, a reset) on the event loop while
    the group's worker thread flushes and checkpoints. Both write the checkpoint through checkpoint.tmp,
    so unserialised the second rename failed (ENOENT) and the store, then the node, stopped: seen as a
    restarted old primary exiting right after it followed the new epoch."""
    store = NodeStore(tmp_path / "s", StoreConfig(**SMALL_STORE))
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker() -> None:
        while not stop.is_set():
            try:
                store.checkpoint()
                store.flush()
            except BaseException as e:  # reported below
                errors.append(e)
                return

    t = threading.Thread(target=worker)
    t.start()
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not errors:
            store.append([b"x" * 100] * 20, 1)
            store.flush()
            store.set_committed(store.end_index)
            store.discard_after(store.end_index - 10)  # committed entries too, as a backup may
    finally:
        stop.set()
        t.join(10)
        store.close()
    assert not errors, errors
