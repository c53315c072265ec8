"""The admin HTTP port (aiohttp): `/status` as JSON and `/metrics` in Prometheus text format."""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING

from aiohttp import web

from ..ha.node import HaNode
from ..raft.messages import Role
from .metrics import Exposition

if TYPE_CHECKING:
    from .node import NodeServer


async def start_admin(node: NodeServer, sock: socket.socket) -> web.AppRunner:
    """Serve the admin endpoints on the listening socket `sock`; returns the runner to clean up."""
    app = web.Application()

    async def status(_request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(node.status(), indent=2), content_type="application/json")

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=render_metrics(node), content_type="text/plain", charset="utf-8")

    async def index(_request: web.Request) -> web.Response:
        return web.Response(text=f"quorumlog node {node.node_id}: /status /metrics\n")

    app.router.add_get("/", index)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner


def render_metrics(node: NodeServer) -> str:
    """Every metric of the node, labelled by group (and peer where it applies)."""
    x = Exposition()
    node_label = node.node_id
    x.sample("quorumlog_peer_messages_sent_total", "counter", "Raft messages sent to peers", node.links.sent,
             node=node_label)
    x.sample("quorumlog_peer_messages_dropped_total", "counter", "Raft messages dropped (peer unreachable)",
             node.links.dropped, node=node_label)
    x.sample("quorumlog_tail_subscriptions", "gauge", "live TAIL subscriptions", len(node.tails), node=node_label)
    x.histogram("quorumlog_loop_lag_seconds", "how late the event loop ran a 10 ms timer: the time a frame may "
                "wait to be handled", node.loop_lag, node=node_label)
    x.sample("quorumlog_hello_refused_total", "counter", "connections refused at HELLO (cluster, secret, members)",
             node.server.refusals.count if node.server is not None else 0, node=node_label)
    server = node.server
    x.sample("quorumlog_connections", "gauge", "accepted connections open (clients and peers)",
             len(server.connections) if server is not None else 0, node=node_label)
    for limit in ("connections", "requests", "output"):
        x.sample("quorumlog_limit_hits_total", "counter", "connections refused (connections) or held unread "
                 "(requests: max_requests_per_connection, output: max_output_bytes_per_connection)",
                 server.limits[limit] if server is not None else 0, node=node_label, limit=limit)
    x.sample("quorumlog_reads_clamped_total", "counter", "READs that asked for more bytes than one frame holds",
             node.reads_clamped, node=node_label)
    for pid, n in sorted(node.links.refusals().items()):
        x.sample("quorumlog_peer_refusals_total", "counter", "this node's HELLOs a peer refused", n,
                 node=node_label, peer=pid)
    for g in node.groups.values():
        lab = {"node": node_label, "group": g.name}
        st = g.stats
        s = g.store
        raft = g.node
        x.histogram("quorumlog_append_latency_seconds", "client append: arrival to answer, per request",
                    st.append_latency, **lab)
        x.histogram("quorumlog_commit_latency_seconds", "proposal to quorum commit, per proposal batch",
                    st.commit_latency, **lab)
        x.histogram("quorumlog_fsync_latency_seconds", "store flush (fdatasync) duration", st.fsync_latency,
                    **lab)
        x.sample("quorumlog_entries_in_total", "counter", "entries appended by clients or received from the leader",
                 st.entries_in, **lab)
        x.sample("quorumlog_bytes_in_total", "counter", "bytes appended by clients or received from the leader",
                 st.bytes_in, **lab)
        x.sample("quorumlog_entries_out_total", "counter", "entries served to readers and tail subscribers",
                 st.entries_out, **lab)
        x.sample("quorumlog_bytes_out_total", "counter", "bytes served to readers and tail subscribers",
                 st.bytes_out, **lab)
        x.sample("quorumlog_replication_bytes_out_total", "counter", "entry bytes pushed to followers",
                 st.push_bytes_out, **lab)
        x.sample("quorumlog_flushes_total", "counter", "store flushes (group commits)", st.flushes, **lab)
        for (call, error), n in sorted(st.core_errors.items()):
            x.sample("quorumlog_core_errors_total", "counter",
                     "unexpected errors out of the Raft core, survived (a disk error stops the node instead)",
                     n, **lab, call=call, error=error)
        x.sample("quorumlog_term", "gauge", "current Raft term", raft.term, **lab)
        x.sample("quorumlog_role", "gauge", "0 follower, 1 candidate, 2 leader", int(raft.role), **lab)
        x.sample("quorumlog_is_leader", "gauge", "1 when this node leads the group", int(raft.role == Role.LEADER),
                 **lab)
        x.sample("quorumlog_begin_index", "gauge", "first index held", s.begin_index, **lab)
        x.sample("quorumlog_end_index", "gauge", "last index written", s.end_index, **lab)
        x.sample("quorumlog_committed_index", "gauge", "highest committed index", s.committed_index, **lab)
        x.sample("quorumlog_durable_index", "gauge", "highest index flushed to disk", s.durable_index, **lab)
        x.sample("quorumlog_pending_appends", "gauge", "client append requests not yet answered",
                 g.pending_appends, **lab)
        x.sample("quorumlog_producers", "gauge", "idempotent producers the group remembers", len(raft.producers),
                 **lab)
        x.sample("quorumlog_deduplicated_appends_total", "counter",
                 "retried appends answered with their original entries, nothing written",
                 raft.stats["append_duplicates"], **lab)
        for code in ("out_of_order_sequence", "unknown_producer", "sequence_too_old"):
            x.sample("quorumlog_rejected_sequences_total", "counter",
                     "idempotent appends refused for their sequence, nothing written",
                     raft.stats[f"append_{code}"], **lab, reason=code)
        if raft.role == Role.LEADER:
            for p in g.peers:
                if p != node.node_id:
                    match = raft.peer_match(p)
                    x.sample("quorumlog_peer_match_index", "gauge", "highest index a peer holds (leader's view)",
                             match, **lab, peer=p)
                    x.sample("quorumlog_peer_lag_entries", "gauge", "entries a peer is behind the leader's end",
                             max(0, s.end_index - match), **lab, peer=p)
        if isinstance(raft, HaNode):
            x.sample("quorumlog_ha_epoch", "gauge", "primary/backup: the epoch this node follows or leads", raft.epoch,
                     **lab)
            if raft.primary is not None:
                prim = raft.primary
                x.sample("quorumlog_ha_in_sync_backups", "gauge", "primary/backup: backups in the recorded in-sync set",
                         len(prim.isr), **lab)
                for b in prim.backups.values():
                    x.sample("quorumlog_ha_backup_lag_bytes", "gauge", "primary/backup: bytes a backup has not acked",
                             max(0, s.write_pos - max(b.acked_offset, 0)), **lab, peer=b.id)
        for name, value in sorted(raft.stats.items()):
            x.sample("quorumlog_raft_events_total", "counter", "Raft core event counters", value, **lab, event=name)
    return x.render()
