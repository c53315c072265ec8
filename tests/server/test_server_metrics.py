"""/metrics of real node processes, read by the Prometheus client's own parser: conventional names and
types, labels, cumulative histograms, and values that move with the work the nodes do."""

from __future__ import annotations

import re
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import Metric

from quorumlog.client import Client

from .conftest import FAST_RAFT, metric_value, scrape, wait_until

ROOT = Path(__file__).resolve().parents[2]
# Per-node families carry `node`; every other quorumlog family is per group and carries `group` too.
NODE_ONLY = {"quorumlog_up", "quorumlog_build_info", "quorumlog_start_time_seconds", "quorumlog_uptime_seconds",
             "quorumlog_loop_lag_seconds", "quorumlog_disk_size_bytes", "quorumlog_disk_used_bytes",
             "quorumlog_disk_free_bytes", "quorumlog_peer_messages_sent", "quorumlog_peer_messages_dropped",
             "quorumlog_peer_up", "quorumlog_peer_refusals", "quorumlog_hello_refused", "quorumlog_connections",
             "quorumlog_tail_subscriptions", "quorumlog_limit_hits", "quorumlog_reads_clamped"}


def _families(fams: dict[str, Metric]) -> list[Metric]:
    return list({id(f): f for f in fams.values()}.values())


def _check_conventions(fams: dict[str, Metric], group: str, nodes: tuple[str, ...] = ("n0", "n1", "n2")) -> None:
    ours = [f for f in _families(fams) if f.name.startswith("quorumlog_")]
    assert len(ours) > 40, [f.name for f in ours]
    names = {f.name for f in ours}
    assert names >= NODE_ONLY, NODE_ONLY - names
    for f in _families(fams):
        assert re.fullmatch(r"(quorumlog|process|python)_[a-z0-9_]+", f.name), f.name
        assert f.documentation, f.name
        for s in f.samples:
            if f.type == "counter":
                assert s.name == f.name + "_total", s.name  # every counter's samples end in _total
            elif f.type == "gauge":
                assert not s.name.endswith("_total"), s.name
    for f in ours:
        assert f.type in ("counter", "gauge", "histogram"), (f.name, f.type)
        if "latency" in f.name or "lag_seconds" in f.name or "time" in f.name:
            assert f.name.endswith("_seconds"), f.name
        if "bytes" in f.name:
            assert f.name.endswith("_bytes"), f.name  # counters end in _bytes_total
        for s in f.samples:
            assert s.labels.get("node") in nodes, (s.name, s.labels)
            if f.name not in NODE_ONLY:
                assert s.labels.get("group") == group, (s.name, s.labels)
            else:
                assert "group" not in s.labels, (s.name, s.labels)
    for f in _families(fams):
        if f.type == "histogram":
            _check_histogram(f)


def _check_histogram(f: Metric) -> None:
    """Buckets cumulative, in increasing bounds, ending in +Inf with the count."""
    series: dict[tuple[Any, ...], list[tuple[float, float]]] = defaultdict(list)
    counts: dict[tuple[Any, ...], float] = {}
    for s in f.samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        if s.name.endswith("_bucket"):
            series[key].append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            counts[key] = s.value
    assert series and set(series) == set(counts), f.name
    for key, buckets in series.items():
        bounds = [b for b, _ in buckets]
        values = [v for _, v in buckets]
        assert bounds == sorted(bounds) and bounds[-1] == float("inf"), (f.name, bounds)
        assert values == sorted(values), (f.name, key, values)  # cumulative: never decreasing
        assert values[-1] == counts[key], (f.name, key)


def _check_docs(fams: dict[str, Metric]) -> None:
    """docs/metrics.md lists every metric the exporter makes, and the docs name no metric it does not."""
    made = set(re.findall(r'"(quorumlog_[a-z_]+)"', (ROOT / "src/quorumlog/server/exporter.py").read_text()))
    assert len(made) > 40
    table = (ROOT / "docs/metrics.md").read_text()
    missing = sorted(name for name in made if f"| `{name}` |" not in table)
    assert not missing, f"docs/metrics.md does not list {missing}"
    for doc in ("README.md", "docs/metrics.md", "docs/operations.md", "docs/security.md"):
        for name in set(re.findall(r"\bquorumlog_[a-z_]+", (ROOT / doc).read_text())):
            assert name in fams or name in made, f"{doc} names {name}, which no node exports"


def test_metrics_follow_prometheus_conventions_and_move(cluster_factory: Any) -> None:
    cluster = cluster_factory()
    with Client(cluster.endpoints, retry_timeout=30) as c:
        c.append(b"first")
        leader = c.metadata(with_nodes=False).leader
        lnode = next(n for n in cluster.nodes if n.node_id == leader)
        follower = next(n for n in cluster.nodes if n.node_id != leader)
        before = scrape(lnode.admin_url)
        _check_conventions(before, "g0")
        _check_docs(before)
        lab = {"node": leader, "group": "g0"}
        assert metric_value(before, "quorumlog_up", node=leader) == 1
        assert metric_value(before, "quorumlog_group_role", **lab, role="leader") == 1
        assert metric_value(before, "quorumlog_group_role", **lab, role="follower") == 0
        assert metric_value(before, "quorumlog_is_leader", **lab) == 1
        assert metric_value(before, "quorumlog_has_leader", **lab) == 1
        assert metric_value(before, "quorumlog_elections_total", **lab) >= 1
        assert metric_value(before, "quorumlog_leader_changes_total", **lab) >= 1
        assert metric_value(before, "quorumlog_recovering", **lab) == 0
        assert metric_value(before, "quorumlog_disk_free_bytes", node=leader) > 0
        assert metric_value(before, "quorumlog_store_disk_bytes", **lab) > 0
        for peer in (n.node_id for n in cluster.nodes if n.node_id != leader):
            assert metric_value(before, "quorumlog_peer_lag_entries", **lab, peer=peer) >= 0
            assert metric_value(before, "quorumlog_peer_up", node=leader, peer=peer) == 1

        c.append_many([b"y" * 100] * 50)
        assert len(list(c.read(0, 100))) == 51
        after = scrape(lnode.admin_url)
        _check_conventions(after, "g0")

        def grew(name: str) -> float:
            return metric_value(after, name, **lab) - metric_value(before, name, **lab)

        assert grew("quorumlog_written_entries_total") >= 50
        assert grew("quorumlog_written_bytes_total") >= 50 * 100
        assert grew("quorumlog_append_latency_seconds_count") >= 1
        assert grew("quorumlog_append_latency_seconds_sum") > 0
        assert grew("quorumlog_flushes_total") >= 1
        assert grew("quorumlog_fsync_latency_seconds_count") >= 1
        assert grew("quorumlog_committed_index") >= 50
        assert grew("quorumlog_replication_sent_bytes_total") > 0
        assert grew("quorumlog_read_entries_total") >= 51
        assert grew("quorumlog_log_bytes") >= 50 * 100
        assert metric_value(after, "quorumlog_uptime_seconds", node=leader) \
            > metric_value(before, "quorumlog_uptime_seconds", node=leader)

        # A follower: its own role and view, and no leader-only series.
        fl = {"node": follower.node_id, "group": "g0"}
        wait_until(lambda: metric_value(scrape(follower.admin_url), "quorumlog_committed_index", **fl) >= 50, 10,
                   "the follower's commit")
        fams = scrape(follower.admin_url)
        _check_conventions(fams, "g0")
        assert metric_value(fams, "quorumlog_group_role", **fl, role="follower") == 1
        assert metric_value(fams, "quorumlog_group_role", **fl, role="leader") == 0
        assert metric_value(fams, "quorumlog_has_leader", **fl) == 1
        assert metric_value(fams, "quorumlog_written_entries_total", **fl) >= 50
        assert "quorumlog_peer_lag_entries" not in fams

        # A leadership transfer: the new leader ran an election, the others saw the leader change.
        seen = metric_value(fams, "quorumlog_leader_changes_total", **fl)
        elections = metric_value(fams, "quorumlog_elections_total", **fl)
        assert c.transfer_leader(follower.node_id) == follower.node_id
        wait_until(lambda: metric_value(scrape(follower.admin_url), "quorumlog_is_leader", **fl) == 1, 10,
                   "the transfer")
        fams = scrape(follower.admin_url)
        assert metric_value(fams, "quorumlog_leader_changes_total", **fl) == seen + 1
        assert metric_value(fams, "quorumlog_elections_total", **fl) == elections + 1
        assert metric_value(fams, "quorumlog_term", **fl) > metric_value(after, "quorumlog_term", **lab)


def _membership(node: Any) -> tuple[float, float, float] | None:
    """(voters, learners, change pending) of group g0 in `node`'s /metrics; None while it does not answer."""
    try:
        fams = scrape(node.admin_url)
    except OSError:  # (restarting: its admin port is not up yet)
        return None
    lab = {"node": node.node_id, "group": "g0"}
    return (metric_value(fams, "quorumlog_members", **lab, role="voter"),
            metric_value(fams, "quorumlog_members", **lab, role="learner"),
            metric_value(fams, "quorumlog_member_change_pending", **lab))


def test_membership_metrics_count_a_change_once_appended_and_say_while_it_is_pending(cluster_factory: Any) -> None:
    """quorumlog_members counts the configuration a node follows, which is in force once its CONFIG entry is
    appended: with both followers down, the leader's "add learner n3" cannot commit, yet the leader counts
    the learner at once, and quorumlog_member_change_pending is 1 until the followers are back and the change
    committed. Then the learner's promotion: four voters on every node, the new one included."""
    # Without check-quorum the leader keeps leading, and the change stays asked of it, while its followers are down.
    cluster = cluster_factory(nodes=4, spares=1, raft={**FAST_RAFT, "check_quorum": False})
    spare = cluster.nodes[3]
    with Client(",".join(n.address for n in cluster.members), group="g0", retry_timeout=60) as c:
        c.append(b"first")
        # (the follower answering may not know the leader yet)
        leader = wait_until(lambda: c.metadata(with_nodes=False).leader, 10, "the leader")
        lnode = next(n for n in cluster.nodes if n.node_id == leader)
        assert _membership(lnode) == (3, 0, 0)
        # A spare (join = true) takes the others for voters and itself for a learner until a change names it.
        assert wait_until(lambda: _membership(spare), 20, "the spare's metrics") == (3, 1, 0)
        followers = [i for i, n in enumerate(cluster.members) if n.node_id != leader]
        for i in followers:
            cluster.kill(i)
        with ThreadPoolExecutor(1) as pool:
            asked = pool.submit(c.add_member, "n3", spare.address, learner=True, timeout=60)
            wait_until(lambda: _membership(lnode) == (3, 1, 1), 20, "the learner counted while its change is pending")
            assert not asked.done()  # answered only once committed
            for i in followers:
                cluster.start(i)
            added = asked.result(90)
        assert added.voters == ["n0", "n1", "n2"] and added.learners == ["n3"]
        wait_until(lambda: all(_membership(n) == (3, 1, 0) for n in cluster.nodes), 30,
                   "every node following the committed change")
        grown = c.promote_member("n3", timeout=60)
        assert grown.voters == ["n0", "n1", "n2", "n3"] and grown.learners == []
        wait_until(lambda: all(_membership(n) == (4, 0, 0) for n in cluster.nodes), 30,
                   "every node counting four voters")
        leader = wait_until(lambda: c.metadata(with_nodes=False).leader, 10, "the leader")
        fams = scrape(next(n for n in cluster.nodes if n.node_id == leader).admin_url)
        _check_conventions(fams, "g0", ("n0", "n1", "n2", "n3"))
        for peer in sorted({"n0", "n1", "n2", "n3"} - {leader}):  # the new voter among the leader's peers
            assert metric_value(fams, "quorumlog_peer_lag_entries", node=leader, group="g0", peer=peer) >= 0


def test_metrics_negotiate_openmetrics(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1)
    with Client(cluster.endpoints, retry_timeout=30) as c:
        c.append(b"x")  # the node is up (its admin port is bound before it serves)
    url = cluster.nodes[0].admin_url + "/metrics"
    plain = urllib.request.urlopen(url, timeout=5)
    assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    req = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    om = urllib.request.urlopen(req, timeout=5)
    body = om.read().decode()
    assert om.headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n") and "# TYPE quorumlog_flushes counter" in body


def test_primary_backup_metrics(cluster_factory: Any) -> None:
    cluster = cluster_factory(replication="primary-backup", ha={"ack": "sync"})
    with Client(cluster.endpoints, retry_timeout=30) as c:
        c.append_many([b"z" * 64] * 20)
    primary = cluster.nodes[0]  # the configured primary of epoch 1
    lab = {"node": "n0", "group": "g0"}

    def in_sync() -> bool:
        return metric_value(scrape(primary.admin_url), "quorumlog_ha_in_sync_backups", **lab) == 2

    wait_until(in_sync, 20, "both backups in sync")
    fams = scrape(primary.admin_url)
    _check_conventions(fams, "g0")
    assert metric_value(fams, "quorumlog_group_role", **lab, role="leader") == 1
    assert metric_value(fams, "quorumlog_ha_epoch", **lab) == metric_value(fams, "quorumlog_term", **lab) >= 1
    for backup in ("n1", "n2"):
        assert metric_value(fams, "quorumlog_ha_backup_lag_bytes", **lab, peer=backup) >= 0
        assert metric_value(fams, "quorumlog_peer_lag_entries", **lab, peer=backup) >= 0
    assert "quorumlog_elections_total" not in fams  # no elections in a primary/backup group
    assert metric_value(fams, "quorumlog_written_entries_total", **lab) >= 20
    assert metric_value(fams, "quorumlog_replication_sent_bytes_total", **lab) >= 2 * 20 * 64  # to each backup
    backup = scrape(cluster.nodes[1].admin_url)
    bl = {"node": "n1", "group": "g0"}
    assert metric_value(backup, "quorumlog_group_role", **bl, role="follower") == 1
    assert metric_value(backup, "quorumlog_has_leader", **bl) == 1
    assert metric_value(backup, "quorumlog_written_entries_total", **bl) >= 20  # streamed raw log bytes
    assert metric_value(backup, "quorumlog_written_bytes_total", **bl) >= 20 * 64
    assert "quorumlog_ha_backup_lag_bytes" not in backup


def test_small_flushes_run_on_the_loop_and_large_ones_in_the_worker(cluster_factory: Any) -> None:
    """One append at a time is flushed on the event loop (no hand-off to the worker thread and back); a
    batch of megabytes is flushed in the worker while the loop goes on. Both are durable when answered."""
    cluster = cluster_factory()
    with Client(cluster.endpoints, retry_timeout=30) as c:
        c.append(b"first")
        leader = c.metadata(with_nodes=False).leader
        url = next(n for n in cluster.nodes if n.node_id == leader).admin_url
        lab = {"node": leader, "group": "g0"}

        def counts() -> tuple[float, float]:
            fams = scrape(url)
            return (metric_value(fams, "quorumlog_flushes_total", **lab),
                    metric_value(fams, "quorumlog_flushes_on_loop_total", **lab))

        # Small flushes run on the loop while flushes average under 1 ms (INLINE_FLUSH_MAX_S). Right after
        # tests that wrote much (the disk still writing back) they may not yet: up to 10 rounds of 20.
        rounds = []
        for r in range(10):
            total0, loop0 = counts()
            for i in range(20):
                c.append(b"small %d %d" % (r, i))
            total1, loop1 = counts()
            rounds.append((total0, loop0, total1, loop1))
            if loop1 - loop0 >= 15:  # the odd one may meet a checkpoint
                break
        assert loop1 - loop0 >= 15, rounds
        leader_node = next(n for n in cluster.nodes if n.node_id == leader)

        def durable() -> bool:  # (a majority of followers may answer before the leader's own flush)
            g = c.node_status(leader_node.address)["groups"]["g0"]
            return bool(g["durable_index"] == g["end_index"])

        for _ in range(3):
            c.append_many([bytes(1024)] * 2048)  # 2 MiB: past the bound
            wait_until(durable, 10, "the leader's flush of the batch")  # so the next batch needs its own
        total2, loop2 = counts()
        assert total2 - total1 >= 3 and loop2 == loop1, (total1, loop1, total2, loop2)
        assert next(iter(c.read(0, 10))).body == b"first"
