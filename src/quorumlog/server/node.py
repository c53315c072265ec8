"""The node process: one port for peers and clients, one or more groups (DLedger's proxy), one loop.

Frames are handled as they arrive: peer messages are queued on their group and client appends gathered;
once per loop iteration (`_iterate`, scheduled by the first frame) every group steps its core with what
arrived and proposes the gathered appends as one batch. A timer ticks the cores, another checkpoints and
expires. SIGTERM stops accepting connections and appends, gives the appends already proposed a moment
to commit, answers the rest honestly (group.py), flushes, checkpoints and exits 0.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import Any

from ..config import PERMISSIONS, NodeConfig, is_loopback
from ..core.replica import PRIMARY_BACKUP
from ..errors import CorruptEntryError, QuorumLogError, ResponseCode
from ..net.bodies import unpack
from ..net.connection import Connection, HandlerResult
from ..net.errors import ProtocolError
from ..net.frames import ONEWAY, REQUEST, Frame
from ..net.hello import TOKEN_PREFIX, allowed, is_client_id
from ..net.ops import Op, op_name
from ..net.outbox import Outbox
from ..net.schemas import (
    CHANGE_MEMBERS_REQUEST,
    END_REQUEST,
    GET_REQUEST,
    GET_RESPONSE,
    LEADERSHIP_TRANSFER_REQUEST,
    METADATA_REQUEST,
    METADATA_RESPONSE,
    PROMOTE_REQUEST,
    PROMOTE_RESPONSE,
    READ_REQUEST,
    READ_RESPONSE,
    STATUS_REQUEST,
    STATUS_RESPONSE,
    TAIL_REQUEST,
    TAIL_RESPONSE,
    UNTAIL_REQUEST,
    UNTAIL_RESPONSE,
)
from ..net.server import Server, serve
from ..raft.member import members_digest
from .codec import PEER_OPS, PeerMessage
from .events import NODE, REFUSAL, TRANSFER, CounterWatch, Events
from .flush import LoopTurn
from .group import Group, now_ms
from .housekeeping import Housekeeping
from .liveness import PeerLiveness
from .metrics import Histogram
from .peer_intake import PeerIntake
from .peers import HelloGroups, PeerLinks, bind_listener, split_address
from .reads import IndexBelowBeginError, get_committed, read_committed
from .tail import Tails
from .waits import behind, serve_at

log = logging.getLogger("quorumlog.server")
_BYTES = {bytes}  # the one type of an append's bodies (checked in C: a batch has many)

# At SIGTERM, how long proposed appends may take to commit before they are answered TERM_CHANGED
# (an uncertain outcome the client must resolve); a healthy quorum commits in milliseconds.
SHUTDOWN_DRAIN_S = 1.0


# A READ answer's frame header and fields besides the entries: [code, entries, next, committed].
READ_ANSWER_OVERHEAD = 64


class PermissionDeniedError(QuorumLogError):
    code = ResponseCode.PERMISSION_DENIED


class UnknownGroupError(QuorumLogError):
    code = ResponseCode.UNKNOWN_GROUP


class StartupError(QuorumLogError):
    """The node cannot start (port taken, data dir unusable); the message is one line for the operator."""


class NodeServer(Housekeeping, PeerIntake):
    """Everything one `quorumlog serve` process runs."""

    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        self.node_id = cfg.node_id
        self.groups: dict[str, Group] = {}
        self.server: Server | None = None
        self.tails = Tails(cfg.max_tails_per_connection)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._dirty: set[Group] = set()
        self.outbox = Outbox()  # every connection's writes: flushed once the work of a turn is done
        self._read_limit = cfg.max_frame_bytes - READ_ANSWER_OVERHEAD
        self.reads_clamped = 0  # READs that asked for more than one frame holds
        self._stop = asyncio.Event()
        self._fatal: BaseException | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.started = time.time()
        self.admin: Any = None
        self._admin_sock: socket.socket | None = None
        self.controller: Any = None  # controller.Controller, when a primary/backup group has one
        self.controller_groups = frozenset(g.ha.controller for g in cfg.groups if g.ha.controller is not None)
        self.loop_lag = Histogram()  # seconds each tick woke late (admin: quorumlog_loop_lag_seconds)
        # Peers heard from, pinged once the shortest Raft heartbeat interval (quiet groups: liveness.py).
        self.liveness = PeerLiveness(now_ms(), min((g.raft.heartbeat_interval_ms for g in cfg.groups), default=100))
        self.events = Events()  # recent elections, recoveries, refusals... (status document, dashboard)
        self._counters = CounterWatch()
        peers: dict[str, str] = {}
        for g in cfg.groups:
            peers.update(g.peers)
        self.peer_addresses = peers
        self._link_tasks: set[asyncio.Task[None]] = set()  # links to members a change added or moved
        # Connections kept for peers among max_connections: each dials once (twice while it replaces a lost one).
        self.peer_slots = min(2 * len(set(peers) - {cfg.node_id}), cfg.max_connections // 2)
        # Named at HELLO to every peer, which refuses a group it hosts with another id: nodes of two
        # different groups of one name (or that count different majorities) must not talk.
        # (A primary/backup group without a controller: its configured members' digest. One with a controller
        # names none: its members are its controller group's, whose id is compared, and change with them.)
        self._pb_digests = {g.name: members_digest(g.name, [*g.peers, cfg.node_id]) for g in cfg.groups
                            if g.ha.primary_backup and g.ha.controller is None and not g.join}
        self.group_ids = HelloGroups(self._group_ids)
        self.links = PeerLinks(cfg.node_id, peers, cluster=cfg.cluster, secret=cfg.secret,
                               max_frame_bytes=cfg.max_frame_bytes, groups=self.group_ids,
                               outbox=self.outbox, handler=self._handle)

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def listen(self) -> str:
        if self.cfg.listen:
            return self.cfg.listen
        return self.peer_addresses[self.node_id]

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        loop_turn = LoopTurn()  # one flush on the loop per turn, among all the groups
        for gcfg in self.cfg.groups:
            if gcfg.name in self.controller_groups:  # (never quiet: raft/quiesce.py says why)
                gcfg = replace(gcfg, raft=replace(gcfg.raft, quiesce=False))
            try:
                self.groups[gcfg.name] = Group(self.node_id, gcfg, str(self.cfg.data_dir), self._send,
                                               self._fatal_error, self.outbox.flush, self.events, loop_turn,
                                               self.cfg.scrub_interval_hours * 3600)
            except QuorumLogError as e:
                await self._close_groups()
                raise StartupError(f"cannot open the store of group {gcfg.name} under {self.cfg.data_dir}: {e}") \
                    from None
            except OSError as e:
                await self._close_groups()
                raise StartupError(f"cannot open data dir {self.cfg.data_dir}: {e.strerror or e}") from None
            g = self.groups[gcfg.name]
            g.members.on_change = self._members_changed
            g.members.follow()  # (a log that holds changes: its configuration, its members' addresses)
        host, port = split_address(self.listen)
        tls = None
        if self.cfg.tls_cert is not None:
            from ..tls import client_context, server_context

            try:
                tls = server_context(self.cfg.tls_cert, self.cfg.tls_key or "", self.cfg.tls_ca or "")
                self.links.use_tls(client_context(self.cfg.tls_ca or "", self.cfg.tls_cert, self.cfg.tls_key))
            except (OSError, ValueError) as e:
                await self._close_groups()
                raise StartupError(f"cannot load the TLS certificate, key or CA: {e}") from None
        if self.cfg.secret is None and tls is None and not is_loopback(host):
            if not self.cfg.insecure:
                await self._close_groups()
                raise StartupError(
                    f"refusing to listen on {self.listen} without authentication: anyone who reaches it could "
                    "join as a peer or write to any group. Set a shared secret (secret_file in the node's "
                    "TOML, --secret-file or $QUORUMLOG_SECRET), or run open anyway with --insecure")
            log.warning("node %s listens on %s WITHOUT authentication (--insecure): anyone who reaches it can "
                        "join as a peer or write to any group", self.node_id, self.listen)
        admin = self.cfg.admin_listen
        if admin and self.cfg.admin_token is None and not is_loopback(split_address(admin)[0]):
            if not self.cfg.insecure_admin:
                await self._close_groups()
                raise StartupError(
                    f"refusing to serve the admin port on {admin} without a token: anyone who reaches it could "
                    "read the status of every group and the node's events. Set an admin token (admin_token_file "
                    "in the node's TOML, --admin-token-file or $QUORUMLOG_ADMIN_TOKEN), serve it on loopback "
                    "(--admin-listen 127.0.0.1:PORT), or serve it open anyway with --insecure-admin")
            log.warning("node %s serves its admin port on %s WITHOUT a token (--insecure-admin): anyone who "
                        "reaches it can read the status of every group", self.node_id, admin)
        try:
            self.server = await serve(host, port, self._handle, cluster=self.cfg.cluster, node_id=self.node_id, ssl=tls,
                                      secret=self.cfg.secret, max_frame_bytes=self.cfg.max_frame_bytes,
                                      groups=self.group_ids, on_close=self._on_close,
                                      on_established=self._on_established,
                                      outbox=self.outbox, after_frames=self._after_frames,
                                      max_connections=self.cfg.max_connections,
                                      max_handshakes=self.cfg.max_handshakes,
                                      max_handshakes_per_address=self.cfg.max_handshakes_per_address,
                                      peer_slots=self.peer_slots,
                                      max_inflight=self.cfg.max_requests_per_connection,
                                      max_output_bytes=self.cfg.max_output_bytes_per_connection,
                                      tokens={t.name: (t.secret, t.permissions) for t in self.cfg.tokens if t.secret},
                                      cert_permissions={f"{TOKEN_PREFIX}{t.name}": t.permissions
                                                        for t in self.cfg.tokens})
        except OSError as e:
            await self._close_groups()
            raise StartupError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        if self.cfg.admin_listen:
            try:
                self._admin_sock = bind_listener(self.cfg.admin_listen)
            except OSError as e:
                await self.server.close()
                await self._close_groups()
                raise StartupError(f"cannot listen on admin address {self.cfg.admin_listen}: {e.strerror or e}") \
                    from None
            self._tasks.append(asyncio.create_task(self._serve_admin(self._admin_sock), name="admin"))
        if any(g.ha.controller is not None for g in self.cfg.groups):
            from .controller import Controller

            self.controller = Controller(self)
        self.server.refusals.listener = self._hello_refused
        self.events.record(NODE, f"node {self.node_id} started, serving {', '.join(self.groups)} on {self.listen}")
        self.links.start()
        self._tasks.append(asyncio.create_task(self._ticker(), name="tick"))
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="housekeeping"))
        log.info("node %s serving groups %s on %s", self.node_id, ", ".join(self.groups), self.listen)

    async def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT (or a fatal disk error), shut down. Returns the exit status."""
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        await self._stop.wait()
        await self.shutdown()
        if self._fatal is not None:
            log.critical("node %s stopped: %s", self.node_id, self._fatal)
            return 3
        return 0

    def stop(self) -> None:
        self._stop.set()

    def _fatal_error(self, e: BaseException) -> None:
        if self._fatal is None:
            self._fatal = e
            # With the traceback: where the disk failed (the store's first failure is chained to any
            # later "failed earlier" error).
            log.critical("node %s: fatal store error, stopping: %s", self.node_id, e, exc_info=e)
        self._stop.set()

    async def _serve_admin(self, sock: socket.socket) -> None:
        """Serve the admin endpoints on the bound socket. The HTTP server's import (a third of a second
        on a busy machine) runs in a thread: groups elect and serve meanwhile; requests wait in the
        socket's backlog."""
        loop = asyncio.get_running_loop()
        admin = await loop.run_in_executor(None, importlib.import_module, "quorumlog.server.admin")
        try:
            self.admin = await admin.start_admin(self, sock)
        except OSError as e:
            log.error("node %s: cannot serve the admin endpoints on %s: %s", self.node_id, self.cfg.admin_listen, e)

    async def shutdown(self) -> None:
        if self.server is not None:
            self.server.stop_accepting()
        for g in self.groups.values():
            g.stop_appends()
        if self._fatal is None:
            await self._drain(SHUTDOWN_DRAIN_S)
        for t in self._tasks:
            t.cancel()
        if self.controller is not None:
            await self.controller.close()
        await self.tails.close()
        await self._close_groups()
        if self.admin is not None:
            await self.admin.cleanup()
        elif self._admin_sock is not None:
            self._admin_sock.close()
        if self.server is not None:
            await self.server.close("node shutting down", timeout=2.0)
        await self.links.close()

    async def _drain(self, timeout: float) -> None:
        """Let proposed appends commit (the loop, ticks and peer links keep running), bounded."""
        assert self._loop is not None
        deadline = self._loop.time() + timeout
        while any(g.proposals_waiting for g in self.groups.values()) and self._loop.time() < deadline:
            await asyncio.sleep(0.005)

    async def _close_groups(self) -> None:
        for g in list(self.groups.values()):
            try:
                await g.close()
            except QuorumLogError as e:
                log.error("group %s: closing the store failed: %s", g.name, e)

    def _group_ids(self) -> dict[str, str]:
        """What this node names at HELLO (self.group_ids, read at each handshake): for a Raft group, the id
        its store records (raft/reconfig.py), the same before and after its members change, none while a
        node that joins has yet to learn it; for a primary/backup group without a controller, its configured
        members' digest (none when this node joins it with `join = true`), as before group ids."""
        ids = dict(self._pb_digests)
        for name, g in self.groups.items():
            node = g.raft_node
            if node is not None and node.group_id is not None:
                ids[name] = node.group_id
        return ids

    def _members_changed(self, g: Group) -> None:
        """A group's configuration changed (members.py): reach its members at their addresses. (Its group
        id, named at HELLO, stays what it was.)"""
        for pid, addr in g.peers.items():
            if pid != self.node_id and self.peer_addresses.get(pid) != addr:
                self.peer_addresses[pid] = addr
                self._link_tasks.add(task := asyncio.get_running_loop().create_task(self.links.ensure(pid, addr)))
                task.add_done_callback(self._link_tasks.discard)

    def _hello_refused(self, peer_id: str | None, host: str, reason: str) -> None:
        self.events.record(REFUSAL, f"refused HELLO of {peer_id or 'a connection'} from {host}: {reason}")

    # -- the per-iteration step --------------------------------------------------------------------
    def _kick(self, group: Group) -> None:
        self._dirty.add(group)
        if not self._scheduled:
            self._scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._iterate)

    def _after_frames(self) -> None:
        """Frames that arrived together were handled: step the idle groups they concern and write what
        that produced, all in this turn. A group with a flush running is left to the end of the loop
        iteration (`_iterate`), where everything that arrived meanwhile makes one step: what it writes
        waits for the next flush anyway, and under load that batching is worth more than the turn."""
        dirty = self._dirty
        for g in [g for g in dirty if not g.driver.flushing]:
            dirty.discard(g)
            g.process()
            if g.appends:
                self._kick(g)
        self.outbox.flush()

    def _iterate(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, set()
        for g in dirty:
            g.process()  # survives core errors itself, like tick
            if g.appends:  # more than one proposal's worth arrived: go on next iteration
                self._kick(g)

    def _send(self, m: PeerMessage) -> None:
        self.links.send(m)

    send_peer = _send  # (the controller's commands to the controller group's leader)

    # -- frames ------------------------------------------------------------------------------------
    def _on_close(self, conn: Connection) -> None:
        self.tails.drop_connection(conn)
        if conn.peer_id is not None and self.links.inbound.get(conn.peer_id) is conn:
            del self.links.inbound[conn.peer_id]

    def _on_established(self, conn: Connection) -> None:
        if conn.peer_id is not None and not is_client_id(conn.peer_id):
            self.links.inbound[conn.peer_id] = conn  # (peers.py answers a peer it has no address for here)

    def _group(self, name: str, conn: Connection | None = None, *needs: str) -> Group:
        """The hosted group `name`, if `conn` has one of the permissions `needs` in it (hello.allowed)."""
        perms = conn.permissions if conn is not None else None
        # A controller group's commands elect the primaries of every group it controls: only peers and holders
        # of the cluster's secret append there, whatever a token's permissions say ("*" included).
        ctl = perms is not None and needs == ("append",) and name in self.controller_groups
        if ctl or (perms is not None and not any(allowed(perms, name, n) for n in needs)):
            what = "append to a controller group (only peers and the cluster's secret may)" if ctl else \
                "/".join(needs)
            who = conn.peer_id if conn else "?"
            self.events.record(REFUSAL, f"permission denied: {who} may not {what}",
                               name if name in self.groups else None)
            raise PermissionDeniedError(f"{who} may not {what} in group {name!r} (node {self.node_id}): nothing "
                                        "was done")
        g = self.groups.get(name)
        if g is None:
            # The groups it hosts that this connection may use at all (a token sees only its own).
            hosted = [n for n in self.groups if perms is None or any(allowed(perms, n, p) for p in PERMISSIONS)]
            raise UnknownGroupError(f"group {name!r} is not hosted by node {self.node_id}"
                                    + (f" (it hosts {', '.join(hosted)})" if hosted else ""))
        return g

    def _handle(self, conn: Connection, f: Frame) -> HandlerResult | Awaitable[HandlerResult]:
        op = f.op
        if f.kind == ONEWAY:
            if op in PEER_OPS:
                self._peer_frame(conn, f)
                return None
            if op == Op.NODE_PING and self._node_ping(conn):
                return None
            raise ProtocolError(f"unexpected one-way {op_name(op)} frame")
        if f.kind != REQUEST:
            return None
        if op == Op.APPEND or op == Op.APPEND_BATCH:
            self._append(conn, f, single=op == Op.APPEND)
            return None
        if op == Op.READ:  # (READ, GET and TAIL wait for their min_index, if they must: waits.py)
            r = READ_REQUEST.decode(f.body)
            g = self._group(r.group, conn, "read")
            if behind(g, r.min_index):
                return serve_at(conn, f, g, r.min_index, lambda: self._read(g, r))
            return self._read(g, r)
        if op == Op.GET:
            r = GET_REQUEST.decode(f.body)
            g = self._group(r.group, conn, "read")
            if behind(g, r.min_index):
                return serve_at(conn, f, g, r.min_index, lambda: self._get(g, r.index))
            return self._get(g, r.index)
        if op == Op.METADATA:
            r = METADATA_REQUEST.decode(f.body)
            g = self._group(r.group, conn, "read", "append", "admin")
            leader, term = g.metadata()
            return METADATA_RESPONSE.ok(g.name, leader, term, g.peers)
        if op == Op.TAIL:
            r = TAIL_REQUEST.decode(f.body)
            g = self._group(r.group, conn, "read")
            if behind(g, r.min_index):
                return serve_at(conn, f, g, r.min_index, lambda: self._tail(conn, f, g, r.from_index,
                                                                            r.include_control))
            return self._tail(conn, f, g, r.from_index, r.include_control)
        if op == Op.END:  # answered at once (local) or once proven (ends.py)
            r = END_REQUEST.decode(f.body)
            self._group(r.group, conn, "read").ends.request(conn, f, r.consistency, self.controller)
            return None
        if op == Op.UNTAIL:
            r = UNTAIL_REQUEST.decode(f.body)
            self.tails.stop(conn, r.subscription)
            return UNTAIL_RESPONSE.ok()
        if op == Op.STATUS:
            r = STATUS_REQUEST.decode(f.body)
            if r.group is not None:
                self._group(r.group, conn, "read", "admin")
                return STATUS_RESPONSE.ok(self.status([r.group]))
            # Every group the connection may read or administer (a reader plans its reads by the replicas'
            # indexes); refused only when that is none.
            perms = conn.permissions
            if perms is None:
                return STATUS_RESPONSE.ok(self.status())
            visible = [n for n in self.groups if allowed(perms, n, "read") or allowed(perms, n, "admin")]
            if self.groups and not visible:
                raise PermissionDeniedError(f"{conn.peer_id} may not read or admin any group of node "
                                            f"{self.node_id}: nothing was done")
            return STATUS_RESPONSE.ok(self.status(visible))
        if op == Op.PROMOTE:
            r = PROMOTE_REQUEST.decode(f.body)
            return self._promote(conn, f, self._group(r.group, conn, "admin"), r.target, r.epoch, r.force)
        if op == Op.LEADERSHIP_TRANSFER:
            r = LEADERSHIP_TRANSFER_REQUEST.decode(f.body)
            g = self._group(r.group, conn, "admin")
            g.transfer(conn, f, r.target)
            return None
        if op == Op.CHANGE_MEMBERS:
            r = CHANGE_MEMBERS_REQUEST.decode(f.body)
            g = self._group(r.group, conn, "admin")
            if g.ha_node is not None:  # (through its controller group, or refused without one)
                if self.controller is None or g.cfg.ha.controller is None:
                    g.members.request(conn, f, r.action, r.target, r.address)
                else:
                    self.controller.change_members(conn, f, g, r.action, r.target, r.address)
            else:
                g.members.request(conn, f, r.action, r.target, r.address)
            return None
        raise QuorumLogError(f"{op_name(op)} is not served by a node", ResponseCode.UNSUPPORTED)

    def _read(self, g: Group, r: Any) -> HandlerResult:
        max_bytes = r.max_bytes
        if max_bytes > self._read_limit:  # an answer must fit in one frame: read no more than that
            max_bytes = self._read_limit
            self.reads_clamped += 1
        try:
            data, nxt, committed = read_committed(g.store, r.from_index, r.max_entries, max_bytes, r.include_control)
        except CorruptEntryError as e:
            g.on_corruption(e)
            raise
        g.stats.entries_out += nxt - r.from_index
        g.stats.bytes_out += len(data)
        return READ_RESPONSE.ok(data, nxt, committed)

    @staticmethod
    def _get(g: Group, index: int) -> HandlerResult:
        try:
            data = get_committed(g.store, index)
        except CorruptEntryError as e:
            g.on_corruption(e)
            raise
        g.stats.entries_out += 1
        g.stats.bytes_out += len(data)
        return GET_RESPONSE.ok(data)

    def _tail(self, conn: Connection, f: Frame, g: Group, start: int, include_control: bool) -> HandlerResult:
        """Answer a TAIL and start its subscription (None: answered here)."""
        if start < g.store.begin_index:
            raise IndexBelowBeginError(f"index {start} is below this node's first index {g.store.begin_index}")
        self.tails.check(conn)
        conn.respond(f, TAIL_RESPONSE.ok(g.store.committed_index))
        self.tails.start(conn, f.request_id, g, start, include_control)
        return None

    def _append(self, conn: Connection, f: Frame, single: bool) -> None:
        values = unpack(f.body)
        # The hot path: check the shape by hand rather than through the schema (a batch has many bodies).
        # Two layouts: [group, bodies] and [group, bodies, producer, seq, expected_end] (schemas.py).
        n = len(values) if type(values) is tuple else 0
        if ((n != 2 and n != 5) or type(values[0]) is not str
                or (single and type(values[1]) is not bytes)
                or (not single and (type(values[1]) is not tuple or not set(map(type, values[1])) <= _BYTES))
                or (n == 5 and not _valid_producer(values[2], values[3], values[4]))):
            name = "AppendRequest" if single else "AppendBatchRequest"
            raise ProtocolError(f"{name}: expected [group: str, {'body: bytes' if single else 'bodies: list[bytes]'}"
                                "] or with [producer: 0..2^63-1, seq: >= 0 (or -1 without a producer), "
                                "expected_end: >= -1 (or -2: none)] after them")
        g = self._group(values[0], conn, "append")
        bodies = [values[1]] if single else list(values[1])
        limit = g.cfg.store.max_body_bytes
        if not bodies:
            raise QuorumLogError("an append needs at least one body", ResponseCode.REQUEST_WITH_EMPTY_BODYS)
        if max(map(len, bodies)) > limit:
            raise QuorumLogError(f"entry body exceeds the maximum of {limit} bytes", ResponseCode.UNEXPECTED_ARGUMENT)
        producer, seq, expected_end = values[2:] if n == 5 else (0, -1, -2)
        if g.enqueue_append(conn, f, bodies, single, producer, seq, None if expected_end == -2 else expected_end):
            self._kick(g)

    def _promote(self, conn: Connection, f: Frame, g: Group, target: str, epoch: int, force: bool) -> HandlerResult:
        node = g.node
        if node.replication != PRIMARY_BACKUP:
            raise QuorumLogError(f"group {g.name} is a Raft group: use LEADERSHIP_TRANSFER", ResponseCode.UNSUPPORTED)
        if target not in g.peers:
            raise QuorumLogError(f"{target!r} is not a member of group {g.name}", ResponseCode.UNKNOWN_MEMBER)
        if self.controller is not None and g.cfg.ha.controller is not None:
            self.controller.promote(conn, f, g, target, force)  # answered once the controller recorded it
            return None
        if target != self.node_id:
            raise QuorumLogError(f"send the promotion to {target} itself (this is {self.node_id})",
                                 ResponseCode.UNEXPECTED_MEMBER)
        if epoch <= node.term:  # (a primary/backup core's term is its epoch)
            raise QuorumLogError(f"epoch {epoch} is not above {self.node_id}'s epoch {node.term} in group {g.name}",
                                 ResponseCode.EXPIRED_TERM)
        g.apply(node.promote(epoch, now_ms()))
        self.events.record(TRANSFER, f"{self.node_id} promoted to primary of epoch {epoch}", g.name)
        log.warning("group %s: %s promoted to primary of epoch %d", g.name, self.node_id, epoch)
        return PROMOTE_RESPONSE.ok(self.node_id, epoch)

    # -- status ------------------------------------------------------------------------------------
    def status(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """The node's status document (STATUS and /status): of every group, or of the groups `names` (what a
        token may see), with only their events."""
        groups = [self._group(n) for n in names] if names is not None else list(self.groups.values())
        return {
            "node": self.node_id, "cluster": self.cfg.cluster, "listen": self.listen,
            "admin": self.cfg.admin_listen, "uptime_s": round(time.time() - self.started, 3),
            "peers_connected": self.links.connected(),
            "peer_refusals": self.links.refusals(),  # our HELLOs each peer refused
            "hello_refusals": self.server.refusals.count if self.server is not None else 0,  # we refused
            "loop_lag_s": self.loop_lag.doc(),
            "groups": {g.name: g.status() for g in groups},
            # Oldest first; asked for some groups (a token may see no other), theirs only.
            "events": [e for e in self.events.recent() if names is None or e["group"] in names],
        }


def _valid_producer(producer: object, seq: object, expected_end: object) -> bool:
    if type(producer) is not int or type(seq) is not int or type(expected_end) is not int:
        return False
    if not 0 <= producer < 1 << 63 or expected_end < -2 or expected_end >= 1 << 63:
        return False
    return 0 <= seq < 1 << 63 if producer else seq == -1
