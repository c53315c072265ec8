"""The node's Prometheus exporter: a collector that reads, at scrape time, the counters, gauges and
histograms the node keeps anyway (collect-on-scrape), in a registry of its own per node.

The hot path never touches prometheus_client: it bumps plain ints and `metrics.Histogram` buckets, and
this collector turns them into metric families when /metrics is scraped (on the event loop, so every
value is read between two steps of the node). docs/metrics.md lists every metric.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import weakref
from collections.abc import Collection, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from .. import __version__
from ..core.replica import RAFT
from ..core.role import Role
from .metrics import Histogram

if TYPE_CHECKING:
    from ..store.file_store import FileStore
    from .group import Group
    from .node import NodeServer

NODE = ["node"]
GROUP = ["node", "group"]
SEQUENCE_REJECTIONS = ("out_of_order_sequence", "unknown_producer", "sequence_too_old")

_registries: weakref.WeakKeyDictionary[NodeServer, CollectorRegistry] = weakref.WeakKeyDictionary()


def node_registry(node: NodeServer) -> CollectorRegistry:
    """The node's own registry (never the process-wide default: a test may run several nodes in one
    process): its collector, plus the client library's process, platform and GC collectors."""
    reg = _registries.get(node)
    if reg is None:
        reg = _registries[node] = CollectorRegistry()
        reg.register(NodeCollector(node))
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
    return reg


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _buckets(h: Histogram) -> list[tuple[str, float]]:
    """Cumulative buckets ending in +Inf, from the node's per-bucket counts."""
    out: list[tuple[str, float]] = []
    seen = 0
    for bound, c in zip(h.bounds, h.counts, strict=False):
        seen += c
        out.append((floatToGoString(bound), seen))
    out.append(("+Inf", h.count))
    return out


def _store_disk_bytes(store: FileStore) -> int:
    """Disk blocks the store's segment files take (they are sparse until written: not their size)."""
    total = 0
    for segments in (store.data, store.index):
        for seg in segments.segments:
            total += os.fstat(seg.fd).st_blocks * 512
    return total


class NodeCollector(Collector):
    """Every metric of one NodeServer, read when scraped."""

    def __init__(self, node: NodeServer) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        yield from self._node_metrics()
        yield from self._group_metrics()

    # -- the node ------------------------------------------------------------------------------
    def _node_metrics(self) -> Iterator[Metric]:
        node = self.node
        nl = [node.node_id]
        server = node.server
        up = _gauge("quorumlog_up", "1 while the node serves (a node that is down does not answer the scrape: "
                    "see Prometheus's own `up`)", NODE)
        up.add_metric(nl, 1)
        yield up
        info = _gauge("quorumlog_build_info", "always 1; the labels name the node's quorumlog version and cluster",
                      ["node", "version", "cluster"])
        info.add_metric([node.node_id, __version__, node.cfg.cluster], 1)
        yield info
        start = _gauge("quorumlog_start_time_seconds", "when the node started, seconds since the Unix epoch", NODE)
        start.add_metric(nl, node.started)
        yield start
        uptime = _gauge("quorumlog_uptime_seconds", "seconds since the node started", NODE)
        uptime.add_metric(nl, max(0.0, time.time() - node.started))
        yield uptime
        lag = HistogramMetricFamily("quorumlog_loop_lag_seconds", "how late the event loop ran a 10 ms timer: "
                                    "the time a frame may wait to be handled", labels=NODE)
        lag.add_metric(nl, _buckets(node.loop_lag), node.loop_lag.total)
        yield lag
        yield from _disk(node, nl)
        sent = _counter("quorumlog_peer_messages_sent_total", "Raft and replication messages sent to peers", NODE)
        sent.add_metric(nl, node.links.sent)
        dropped = _counter("quorumlog_peer_messages_dropped_total", "peer messages dropped (peer unreachable)", NODE)
        dropped.add_metric(nl, node.links.dropped)
        yield from (sent, dropped)
        peer_up = _gauge("quorumlog_peer_up", "1 while this node's outbound link to the peer is connected",
                         ["node", "peer"])
        for pid, connected in sorted(node.links.connected().items()):
            peer_up.add_metric([node.node_id, pid], int(connected))
        yield peer_up
        refused = _counter("quorumlog_peer_refusals_total", "this node's HELLOs the peer refused (cluster, secret "
                           "or member list differ)", ["node", "peer"])
        for pid, n in sorted(node.links.refusals().items()):
            refused.add_metric([node.node_id, pid], n)
        yield refused
        hello = _counter("quorumlog_hello_refused_total", "connections this node refused at HELLO (cluster, secret, "
                         "members)", NODE)
        hello.add_metric(nl, server.refusals.count if server is not None else 0)
        yield hello
        conns = _gauge("quorumlog_connections", "accepted connections open (clients and peers)", NODE)
        conns.add_metric(nl, len(server.connections) if server is not None else 0)
        yield conns
        tails = _gauge("quorumlog_tail_subscriptions", "live TAIL subscriptions", NODE)
        tails.add_metric(nl, len(node.tails))
        yield tails
        limits = _counter("quorumlog_limit_hits_total", "connections refused (connections: max_connections; "
                          "handshakes: max_handshakes, max_handshakes_per_address), accepts failed (accept_errors) "
                          "or connections held unread (requests: max_requests_per_connection, output: "
                          "max_output_bytes_per_connection)", ["node", "limit"])
        for limit in ("connections", "handshakes", "accept_errors", "requests", "output"):
            limits.add_metric([node.node_id, limit], server.limits[limit] if server is not None else 0)
        yield limits
        clamped = _counter("quorumlog_reads_clamped_total", "READs that asked for more bytes than one frame holds",
                           NODE)
        clamped.add_metric(nl, node.reads_clamped)
        yield clamped

    # -- the groups ----------------------------------------------------------------------------
    def _group_metrics(self) -> Iterator[Metric]:
        fams = _Families()
        for g in self.node.groups.values():
            fams.labels = [self.node.node_id, g.name]
            _one_group(fams, g)
        yield from fams.families.values()


class _Families:
    """Metric families by name, each made at its first sample: one HELP and TYPE for every group's samples.
    `labels` are the current group's (node, group)."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}
        self.labels: list[str] = []

    def _family(self, kind: type[Metric], name: str, doc: str, extra: tuple[str, ...]) -> Metric:
        m = self.families.get(name)
        if m is None:
            m = self.families[name] = kind(name, doc, labels=[*GROUP, *extra])  # type: ignore[call-arg]
        return m

    def counter(self, name: str, doc: str, value: float, **extra: str) -> None:
        fam = self._family(CounterMetricFamily, name, doc, tuple(extra))
        fam.add_metric([*self.labels, *extra.values()], value)  # type: ignore[attr-defined]

    def gauge(self, name: str, doc: str, value: float, **extra: str) -> None:
        fam = self._family(GaugeMetricFamily, name, doc, tuple(extra))
        fam.add_metric([*self.labels, *extra.values()], value)  # type: ignore[attr-defined]

    def histogram(self, name: str, doc: str, h: Histogram) -> None:
        fam = self._family(HistogramMetricFamily, name, doc, ())
        fam.add_metric(self.labels, _buckets(h), h.total)  # type: ignore[attr-defined]


def _disk(node: NodeServer, nl: list[str]) -> Iterator[Metric]:
    try:
        usage = shutil.disk_usage(node.cfg.data_dir)
    except OSError:  # the data dir is gone: the store's own checks fail the node; report nothing here
        return
    for name, doc, value in (
            ("quorumlog_disk_size_bytes", "size of the file system holding the data dir", usage.total),
            ("quorumlog_disk_used_bytes", "bytes in use on that file system (appends are refused past "
             "disk_full_ratio of its size)", usage.used),
            ("quorumlog_disk_free_bytes", "bytes free on that file system for unprivileged users", usage.free)):
        g = _gauge(name, doc, NODE)
        g.add_metric(nl, value)
        yield g


def _members(f: _Families, voters: Collection[str], learners: Collection[str],
             configs: Sequence[tuple[int, int, bytes]], committed: int) -> None:
    """A Raft group's configuration as this node follows it (raft/reconfig.py: the last CONFIG entry in its
    log, in force once appended; the configured members while the log holds none)."""
    for role, ids in (("voter", voters), ("learner", learners)):
        f.gauge("quorumlog_members", "members of the Raft group's configuration this node follows (the last "
                "CONFIG entry in its log, committed or not), by role", len(ids), role=role)
    f.gauge("quorumlog_member_change_pending", "1 while the last CONFIG entry in this node's log of the Raft "
            "group is not committed (a membership change under way)", int(bool(configs) and configs[-1][0] > committed))


def _one_group(f: _Families, g: Group) -> None:
    """Group `g`'s samples."""
    st, s, core = g.stats, g.store, g.node
    role = core.role
    for r in Role:
        f.gauge("quorumlog_group_role", "1 for the node's current role in the group (leader: the Raft leader "
                "or the primary), 0 for the others", int(r == role), role=r.name.lower())
    f.gauge("quorumlog_is_leader", "1 when this node leads the group (Raft leader or primary)",
            int(role == Role.LEADER))
    f.gauge("quorumlog_has_leader", "1 when this node knows a leader (or primary) of the group",
            int(core.leader_id is not None))
    f.gauge("quorumlog_term", "current Raft term (primary/backup: the epoch)", core.term)
    f.counter("quorumlog_leader_changes_total", "times this node saw the group's leader change (the first "
              "leader it learns of counts)", st.leader_changes)
    if core.replication == RAFT:  # (a primary/backup group's elections are the controller's)
        f.counter("quorumlog_elections_total", "elections this node started (campaigns after a won pre-vote)",
                  core.stats["campaigns"])
    f.gauge("quorumlog_recovering", "1 while the replica is repaired from its peers (after damage, or joined "
            "with an empty disk): it neither votes nor leads", int(g.recovering))
    f.gauge("quorumlog_joining", "1 while a pristine store waits to learn whether the group exists",
            int(core.joining))
    f.gauge("quorumlog_begin_index", "first index held", s.begin_index)
    f.gauge("quorumlog_end_index", "last index written", s.end_index)
    f.gauge("quorumlog_committed_index", "highest committed index", s.committed_index)
    f.gauge("quorumlog_durable_index", "highest index flushed to disk", s.durable_index)
    f.gauge("quorumlog_log_bytes", "bytes of log the replica holds, first entry to the end of the last",
            max(0, s.write_pos - s.begin_pos))
    with contextlib.suppress(OSError):  # the store is closing: its files went from under the scrape
        f.gauge("quorumlog_store_disk_bytes", "disk space the group's data and index segments take",
                _store_disk_bytes(s))
    f.gauge("quorumlog_pending_appends", "client append requests not yet answered", g.pending_appends)
    f.gauge("quorumlog_producers", "idempotent producers the group remembers", len(core.producers))
    f.histogram("quorumlog_append_latency_seconds", "client append: arrival to answer, per request",
                st.append_latency)
    f.histogram("quorumlog_commit_latency_seconds", "client append: arrival to commit, per committed request",
                st.commit_latency)
    f.histogram("quorumlog_fsync_latency_seconds", "store flush (fdatasync) duration", st.fsync_latency)
    f.counter("quorumlog_written_entries_total", "entries written: appended by clients on the leader (or "
              "primary), received from it on a follower (or backup)", st.entries_in)
    f.counter("quorumlog_written_bytes_total", "bytes written: client bodies on the leader (or primary), encoded "
              "entries received from it on a follower (or backup)", st.bytes_in)
    f.counter("quorumlog_read_entries_total", "entries served to readers and tail subscribers", st.entries_out)
    f.counter("quorumlog_read_bytes_total", "bytes served to readers and tail subscribers", st.bytes_out)
    f.counter("quorumlog_min_index_waits_total", "reads (READ, GET, TAIL) that waited for the commit index to reach "
              "the min_index they asked", st.min_index_waits)
    f.counter("quorumlog_min_index_behind_total", "of those, answered FALL_BEHIND_TOO_MUCH: not reached within the "
              "wait", st.min_index_behind)
    f.counter("quorumlog_replication_sent_bytes_total", "entry bytes pushed to followers (or backups)",
              st.push_bytes_out)
    f.counter("quorumlog_flushes_total", "store flushes (group commits)", st.flushes)
    f.counter("quorumlog_flushes_on_loop_total", "store flushes small enough to run on the event loop, not in "
              "the group's worker thread", st.flushes_on_loop)
    scrub = g.scrubber
    f.counter("quorumlog_scrubbed_bytes_total", "log bytes the background scrub read back and checked",
              scrub.scrubbed_bytes)
    f.counter("quorumlog_scrub_passes_total", "background scrub passes completed over the committed log", scrub.passes)
    f.counter("quorumlog_scrub_damaged_entries_total", "damaged entries the background scrub found (each cut and "
              "fetched again, or handed off by a primary)", scrub.damaged)
    for (call, error), n in sorted(st.core_errors.items()):
        f.counter("quorumlog_core_errors_total", "unexpected errors out of the replication core, survived (a "
                  "disk error stops the node instead)", n, call=call, error=error)
    f.counter("quorumlog_deduplicated_appends_total", "retried appends answered with their original entries, "
              "nothing written", core.stats["append_duplicates"])
    for code in SEQUENCE_REJECTIONS:
        f.counter("quorumlog_rejected_sequences_total", "idempotent appends refused for their sequence, nothing "
                  "written", core.stats[f"append_{code}"], reason=code)
    if role == Role.LEADER:
        for p in g.peers:
            if p != g.node_id:
                match = core.peer_match(p)
                f.gauge("quorumlog_peer_match_index", "highest index the peer holds (the leader's view: only the "
                        "leader reports it)", match, peer=p)
                f.gauge("quorumlog_peer_lag_entries", "entries the peer is behind the leader's end (only the "
                        "leader reports it)", max(0, s.end_index - match), peer=p)
    raft = g.raft_node
    if raft is not None:
        _members(f, raft.member.config.voters, raft.member.config.learners, s.configs, s.committed_index)
    ha = g.ha_node
    if ha is not None:
        f.gauge("quorumlog_ha_epoch", "primary/backup: the epoch this node follows or leads", ha.epoch)
        prim = ha.primary
        if prim is not None:
            f.gauge("quorumlog_ha_in_sync_backups", "primary/backup: backups in the recorded in-sync set",
                    len(prim.isr))
            for b in prim.backups.values():
                f.gauge("quorumlog_ha_backup_lag_bytes", "primary/backup: bytes the backup has not acked (only "
                        "the primary reports it)", max(0, s.write_pos - max(b.acked_offset, 0)), peer=b.id)
    for event, n in sorted(core.stats.items()):
        f.counter("quorumlog_raft_events_total", "the replication core's event counters, by event", n,
                  event=event)
