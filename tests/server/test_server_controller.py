"""Controller mode on real processes: a Raft group records each primary/backup group's epoch, primary and
in-sync set, and promotes an in-sync backup when the primary is gone (RocketMQ 5's controller mode)."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from quorumlog.client import AsyncClient
from quorumlog.store.file_store import store_dir

from .conftest import (
    SMALL_STORE,
    await_until,
    committed_entries,
    disk_full_past,
    fill_disk,
    flip_bit,
    metric_value,
    node_index,
    scrape,
    statuses,
    wait_leader,
)
from .history import Op, check_history, fault_leaders, record_appends

HA = {"ack": "sync", "controller": "ctl", "ha_heartbeat_interval_ms": 200, "ha_ack_timeout_ms": 800,
      "failover_timeout_ms": 800}


def test_automatic_failover_under_load_loses_no_acknowledged_append(cluster_factory: Any) -> None:
    """Writers keep appending while the primary is killed or paused (a paused one comes back believing it
    leads: it must be fenced). The controller promotes in-sync backups; the history check then finds every
    acknowledged append exactly once, in real-time order."""
    cluster = cluster_factory(replication="primary-backup", ha=HA)
    ops: list[Op] = []
    rng = random.Random(1123)

    async def main() -> None:
        async with AsyncClient(cluster.endpoints) as admin:
            await wait_leader(admin, cluster)
            clients = [AsyncClient(cluster.endpoints, retry_timeout=20) for _ in range(3)]
            try:
                stop = asyncio.get_running_loop().time() + 16.0
                tasks = [record_appends(c, f"c{k}t{t}", stop, ops) for k, c in enumerate(clients) for t in range(3)]
                nemesis = fault_leaders(admin, cluster, stop, rng, lambda s: s["role"] == "leader" and s["confirmed"],
                                        every_s=(2.0, 3.0), kill_s=(1.5, 2.5), pause_s=(1.5, 2.5), margin_s=4)
                results = await asyncio.gather(nemesis, *tasks)
            finally:
                for c in clients:
                    await c.close()
            faults = results[0]
            assert faults, "the nemesis never found a primary"

            async def settled() -> str | None:
                st = await statuses(admin, cluster)
                primaries = [n for n, s in st.items() if s["role"] == "leader" and s["confirmed"]]
                if len(st) != 3 or len(primaries) != 1:
                    return None
                p = st[primaries[0]]
                ends = {s["committed_index"] for s in st.values()}
                return primaries[0] if ends == {p["end_index"]} and len(p["in_sync"]) == 2 else None

            primary = await await_until(settled, 30, "one primary, every replica caught up and in sync")
            st = await statuses(admin, cluster)
            epochs = {s["epoch"] for s in st.values()}
            assert len(epochs) == 1, st
            logs = {n: [(i, b) for i, b in await committed_entries(cluster.nodes[node_index(cluster, n)].address)
                        if b] for n in st}
            log = logs[primary]
            for n, other in logs.items():
                assert other == log, f"{n}'s committed log differs from the primary's"
            summary = check_history(ops, log)
            assert summary["acked"] > 100, (summary, faults)
            print(f"controller history: {len(ops)} appends, {summary}, faults {faults}, epoch {epochs}")

    asyncio.run(main())


def test_the_controller_promotes_only_an_in_sync_backup(cluster_factory: Any) -> None:
    """A backup that was down left the recorded in-sync set; when the primary then dies, the other backup
    is promoted, never the stale one, and every acknowledged append survives."""
    cluster = cluster_factory(replication="primary-backup", ha=HA)

    async def main() -> None:
        async with AsyncClient(cluster.endpoints) as c:
            await wait_leader(c, cluster)
            acked = [(await c.append(f"a{i}".encode())).index for i in range(20)]
            st = await statuses(c, cluster)
            primary = next(n for n, s in st.items() if s["role"] == "leader")
            backups = sorted(n for n in st if n != primary)
            stale, fresh = backups
            cluster.kill(node_index(cluster, stale))

            async def shrunk() -> bool:
                s = (await statuses(c, cluster))[primary]
                return list(s["in_sync"]) == [fresh]

            await await_until(shrunk, 15, f"{stale} out of the recorded in-sync set")
            acked += [(await c.append(f"b{i}".encode())).index for i in range(20)]
            cluster.kill(node_index(cluster, primary))

            async def promoted() -> str | None:
                st = await statuses(c, cluster)
                p = [n for n, s in st.items() if s["role"] == "leader" and s["confirmed"]]
                return p[0] if p else None

            # The stale backup comes back at once: it must not be chosen.
            cluster.start(node_index(cluster, stale))
            new = await await_until(promoted, 20, "a new primary")
            assert new == fresh
            acked += [(await c.append(f"c{i}".encode())).index for i in range(5)]
            entries = await committed_entries(cluster.nodes[node_index(cluster, new)].address)
            bodies = {i: b for i, b in entries}
            assert len(acked) == 45 and all(i in bodies for i in acked)
            assert [b for _, b in entries if b] == [f"a{i}".encode() for i in range(20)] + \
                [f"b{i}".encode() for i in range(20)] + [f"c{i}".encode() for i in range(5)]

    asyncio.run(main())


@pytest.mark.slow
def test_a_primary_whose_disk_fills_has_an_in_sync_backup_elected_and_writes_go_on(
        cluster_factory: Any, tmp_path: Path) -> None:
    """n0 is the primary and both backups are in sync; then n0's disk fills (a file allocated past its
    disk_full_ratio, set just above the file system's use now). The next SYNC append is not refused: n0
    answers LEADER_TRANSFERRING (nothing written) and asks the controller to elect an in-sync backup; the
    client's retry lands at the new primary, and every acknowledged append reads back there."""
    usage = shutil.disk_usage(tmp_path)
    ratio = (usage.used + (256 << 20)) / usage.total
    if ratio >= 0.85:
        pytest.skip("the file system is too full to raise its use by 512 MiB")
    cluster = cluster_factory(replication="primary-backup", ha=HA, start=False)
    disk_full_past(cluster.nodes[0], ratio)
    cluster.start()
    filler = tmp_path / "filler"

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=20) as c:
            async def in_sync() -> bool:
                s = (await statuses(c, cluster)).get("n0", {})
                return bool(s.get("confirmed")) and sorted(s.get("in_sync", ())) == ["n1", "n2"]

            await await_until(in_sync, 20, "n0 a confirmed primary with both backups in sync")
            acked = {(await c.append(f"a{i}".encode())).index: f"a{i}".encode() for i in range(20)}
            await fill_disk(filler)
            r = await c.append(b"after the disk filled")  # retried at the new primary, not refused
            acked[r.index] = b"after the disk filled"
            st = await statuses(c, cluster)
            new = next(n for n, s in st.items() if s["role"] == "leader" and s["confirmed"])
            assert new in ("n1", "n2") and r.index > max(acked.keys() - {r.index}), st
            assert st["n0"]["disk_full"] and st["n0"]["role"] != "leader"
            acked.update({(await c.append(f"b{i}".encode())).index: f"b{i}".encode() for i in range(20)})
            bodies = dict(await committed_entries(cluster.nodes[node_index(cluster, new)].address))
            assert all(bodies.get(i) == b for i, b in acked.items())
        assert all(n.alive for n in cluster.nodes)

    try:
        asyncio.run(main())
    finally:
        filler.unlink(missing_ok=True)


@pytest.mark.slow
def test_a_primary_whose_disk_is_replaced_never_leads_empty_and_an_in_sync_backup_takes_over(
        cluster_factory: Any) -> None:
    """n0, the primary, loses its disk (every store deleted) and is back before the controller fails over:
    the record still names it primary. It must not lead with its empty log (its backups would be cut to
    it): it asks the controller to elect an in-sync backup, follows it, and catches up; every acknowledged
    append survives on every node."""
    cluster = cluster_factory(replication="primary-backup", ha={**HA, "failover_timeout_ms": 5000})

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            acked = await _n0_in_sync_with_appends(c, cluster)
            cluster.kill(0)
            for d in cluster.nodes[0].data_dir.iterdir():
                if d.is_dir():
                    shutil.rmtree(d)
            cluster.start(0)  # well within failover_timeout_ms: only n0 itself can hand the role on
            await _n0_replaced_and_caught_up(c, cluster, acked)

    asyncio.run(main())


def test_a_primary_whose_log_rotted_while_down_never_leads_with_it_and_catches_up(cluster_factory: Any) -> None:
    """One bit of an old entry's header in n0's log flipped while n0, the primary, was down (below its
    checkpoint: recovery does not read there). Rebuilding its producer table met it and the node failed to
    start. Now it cuts its log there and is `recovering`, as after a replaced disk: an in-sync backup is
    elected in its place, n0 follows it, fetches what it cut, and every acknowledged append is on every
    node."""
    cluster = cluster_factory(replication="primary-backup", ha={**HA, "failover_timeout_ms": 5000})

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            acked = await _n0_in_sync_with_appends(c, cluster)
            entry = await c.get(sorted(acked)[10])
            assert cluster.kill(0, signal.SIGTERM) == 0  # a clean stop: its checkpoint covers the whole log
            flip_bit(Path(store_dir(cluster.nodes[0].data_dir, "g0", "n0")), entry.pos, 7, 0x40)  # the entry size
            cluster.start(0)
            await _n0_replaced_and_caught_up(c, cluster, acked)

    asyncio.run(main())


def test_a_primary_whose_recovery_cut_its_tail_never_leads_with_it_and_catches_up(cluster_factory: Any) -> None:
    """The chaos run with bit flips (primary/backup, partitions, full disks): one bit of the primary's newest
    entry flipped while it was down after a SIGKILL. Recovery cut the log there, as a torn tail (or as a
    damaged durable entry, when its checkpoint covered it), and the node, primary of its epoch by its own
    store, asked to be elected again: its handshakes cut both backups back to its shorter log, and appends
    it had acknowledged were gone everywhere. A log that recovery cut may lack acknowledged entries: the
    node is `recovering`, and an in-sync backup is elected in its place."""
    cluster = cluster_factory(replication="primary-backup", ha={**HA, "failover_timeout_ms": 5000})

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            acked = await _n0_in_sync_with_appends(c, cluster)
            entry = await c.get(max(acked))
            assert cluster.kill(0, signal.SIGKILL) == -signal.SIGKILL
            flip_bit(Path(store_dir(cluster.nodes[0].data_dir, "g0", "n0")), entry.pos, 7, 0x40)  # the entry size
            cluster.start(0)
            await _n0_replaced_and_caught_up(c, cluster, acked)

    asyncio.run(main())


@pytest.mark.parametrize("mark", ["kept", "lost"])
def test_a_backup_whose_recovery_cut_its_tail_never_leads_with_it_and_catches_up(cluster_factory: Any,
                                                                                 mark: str) -> None:
    """The primary/backup simulator's "tail" fault (seeds 19 and 31): n1, in sync, is killed and one bit of
    its newest entry flips while it is down. The primary dies too, and the controller elects n1, the first
    live in-sync member. Leading with a log cut there would cut n2 back to it and lose acknowledged appends.
    With its durable mark, n1's recovery knows the entry was synced: damage, so n1 is `recovering`. Without
    it (a store from before marks, or a power cut that lost both the mark and the entry's bits), recovery
    cuts it as a torn tail, and n1 declines the election. Either way n2 is elected and n1 catches up. (The
    controller waits 8 s for n0, so that n1, restarted at once, is back to be elected first even on a
    loaded machine. n1 declines through its controller's record or through a peer's message naming it
    primary, whichever comes first: the test counts its core's refusals, not one of the two log lines.)"""
    cluster = cluster_factory(replication="primary-backup", ha={**HA, "failover_timeout_ms": 8000},
                              store={**SMALL_STORE, "checkpoint_interval_ms": 600_000})

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            acked = await _n0_in_sync_with_appends(c, cluster)
            last = max(acked)
            entry = await c.get(last)

            async def n1_holds_it() -> bool:
                return (await statuses(c, cluster)).get("n1", {}).get("durable_index", -1) >= last

            await await_until(n1_holds_it, 10, "n1 holding every acknowledged append")
            assert cluster.kill(1, signal.SIGKILL) == -signal.SIGKILL
            n1_store = Path(store_dir(cluster.nodes[1].data_dir, "g0", "n1"))
            flip_bit(n1_store, entry.pos, 7, 0x40)  # the entry size
            if mark == "lost":
                (n1_store / "durable").unlink()
            assert cluster.kill(0, signal.SIGKILL) == -signal.SIGKILL
            cluster.start(1)

            async def n1_back() -> dict[str, Any] | None:
                return (await statuses(c, cluster)).get("n1")

            back = await await_until(n1_back, 20, "n1 back")  # (no primary yet to catch up with)
            if mark == "kept":  # damage, known as such
                assert back["recovering"] and "tail_cut" not in back
            else:  # a torn tail, as far as its recovery can tell
                assert not back["recovering"] and back.get("tail_cut") == last

            async def a_primary() -> str | None:
                st = await statuses(c, cluster)
                return next((n for n, s in st.items() if s["role"] == "leader" and s["confirmed"]), None)

            primary = await await_until(a_primary, 30, "a confirmed primary")
            cluster.start(0)

            async def n0_answers() -> bool:
                return "n0" in await statuses(c, cluster)

            await await_until(n0_answers, 20, "n0 back")
            await _caught_up_and_everything_everywhere(c, cluster, ("n0", "n1"), acked)
            log = cluster.nodes[1].log_path.read_text()
            # n1 refusing to lead with a cut tail: by its controller's record (a "declines epoch" note) or by a
            # peer's message naming it primary, whichever reaches it first; its core counts both.
            families = scrape(cluster.nodes[1].admin_url).get("quorumlog_raft_events_total")
            refused = sum(x.value for x in families.samples if x.labels.get("event") == "ha_primary_refused_tail_cut"
                          and x.name == "quorumlog_raft_events_total"
                          and x.labels.get("group") == "g0") if families else 0
            assert primary == "n2"
            if mark == "kept":
                assert f"durable entry {last} is damaged" in log and "declines" not in log and refused == 0
            else:
                told = [line for line in log.splitlines() if "tail" in line or "declin" in line or "epoch" in line]
                assert "cut a torn or corrupt tail" in log and refused >= 1, told

    asyncio.run(main())


async def _n0_in_sync_with_appends(c: AsyncClient, cluster: Any) -> dict[int, bytes]:
    """Wait for n0 to be a confirmed primary with both backups in sync; append 50; what was acknowledged."""
    async def in_sync() -> bool:
        s = (await statuses(c, cluster)).get("n0", {})
        return bool(s.get("confirmed")) and sorted(s.get("in_sync", ())) == ["n1", "n2"]

    await await_until(in_sync, 20, "n0 a confirmed primary with both backups in sync")
    return {(await c.append(f"a{i}".encode())).index: f"a{i}".encode() for i in range(50)}


async def _n0_replaced_and_caught_up(c: AsyncClient, cluster: Any, acked: dict[int, bytes]) -> None:
    """n0, back with a log that may lack acknowledged entries: an in-sync backup is elected in its place,
    appends go on, n0 catches up and clears, and every acknowledged append is on every node."""
    async def replaced() -> str | None:
        st = await statuses(c, cluster)
        new = [n for n, s in st.items() if s["role"] == "leader" and s["confirmed"]]
        return new[0] if new and new[0] != "n0" else None

    new = await await_until(replaced, 30, "an in-sync backup elected in n0's place")
    await _caught_up_and_everything_everywhere(c, cluster, "n0", acked)
    assert new in ("n1", "n2") and all(n.alive for n in cluster.nodes)


async def _caught_up_and_everything_everywhere(c: AsyncClient, cluster: Any, node_ids: str | tuple[str, ...],
                                               acked: dict[int, bytes]) -> None:
    """Append 20 more; `node_ids` catch up and clear `recovering`; every acknowledged append is on every node."""
    acked.update({(await c.append(f"b{i}".encode())).index: f"b{i}".encode() for i in range(20)})
    ids = (node_ids,) if isinstance(node_ids, str) else node_ids

    async def caught_up() -> bool:
        st = await statuses(c, cluster)
        return all(not st.get(n, {}).get("recovering", True) and st[n].get("committed_index") == max(acked)
                   for n in ids)

    await await_until(caught_up, 30, f"{', '.join(ids)} caught up and cleared")
    for node in cluster.nodes:
        bodies = dict(await committed_entries(node.address))
        assert all(bodies.get(i) == b for i, b in acked.items()), f"{node.node_id} lacks acknowledged entries"


def test_a_fresh_group_reports_no_recovery(cluster_factory: Any) -> None:
    """Every store of a new controlled group starts pristine, and waits for the controller to say whether the
    group is new (a replaced disk is pristine too). That wait is `joining`, as a Raft store's probe is: no
    member may show `recovering`, a RECOVERY event or quorumlog_recovering 1 (the "node in recovery" alert)
    while the group starts and takes writes."""
    cluster = cluster_factory(replication="primary-backup", ha=HA)
    seen: list[tuple[str, str, Any]] = []

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            loop = asyncio.get_running_loop()
            stop = loop.time() + 2.0
            n = 0
            while loop.time() < stop:
                await c.append(f"e{n}".encode())
                n += 1
                if n % 10 == 0:
                    seen.extend((m, "recovering", s["recovering"]) for m, s in (await statuses(c, cluster)).items())
            assert n > 20

    asyncio.run(main())
    assert not [s for s in seen if s[2]], seen
    for node in cluster.nodes:
        doc = json.loads(urllib.request.urlopen(node.admin_url + "/status", timeout=5).read())
        assert not doc["groups"]["g0"]["recovering"] and not doc["groups"]["g0"]["joining"]
        # (g0's own: a member of the controller group, a Raft group, whose probe is answered after the others
        # elected, as on a loaded machine, joins it in recovery, as a wiped one does: it cannot tell the two
        # apart, raft/joining.py. That flaked this test about once in six runs under load.)
        assert [e["text"] for e in doc["events"] if e["kind"] == "recovery" and e["group"] == "g0"] == [], (
            node.node_id, doc["events"], doc["groups"])
        assert metric_value(scrape(node.admin_url), "quorumlog_recovering", group="g0") == 0, node.node_id


@pytest.mark.parametrize("who", ["primary", "backup"])
def test_the_scrub_finds_bit_rot_on_a_primary_or_backup_and_the_group_heals(cluster_factory: Any, who: str) -> None:
    """One body bit of an old entry flips under a running node; nothing reads it. The scrub finds it. A
    backup cuts its log there and is streamed the rest again. The primary, whose copy the others are made
    from, has the controller elect an in-sync backup in its place, then cuts and is streamed it again. Either
    way every acknowledged append ends up on every node, readable."""
    cluster = cluster_factory(replication="primary-backup", ha=HA, node={"scrub_interval_hours": 1 / 3600})

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, retry_timeout=30) as c:
            acked = await _n0_in_sync_with_appends(c, cluster)
            node_id = "n0" if who == "primary" else "n1"
            index = sorted(acked)[10]
            entry = await c.get(index)
            flip_bit(Path(store_dir(cluster.nodes[node_index(cluster, node_id)].data_dir, "g0", node_id)),
                     entry.pos, 48 + 1, 0x20)  # a body bit

            async def found() -> bool:
                return bool((await statuses(c, cluster)).get(node_id, {}).get("scrub", {}).get("damaged"))

            await await_until(found, 20, f"the {who}'s scrub to find the damage")
            if who == "primary":
                await _n0_replaced_and_caught_up(c, cluster, acked)
            else:
                await _caught_up_and_everything_everywhere(c, cluster, "n1", acked)
            async with AsyncClient(cluster.nodes[node_index(cluster, node_id)].address) as direct:
                assert (await direct.get(index)).body == acked[index]

    asyncio.run(main())
