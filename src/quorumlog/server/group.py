"""One group hosted by a node: its core (a RaftNode, or an HaNode for a primary/backup group, driven
through the core/replica.py ReplicaCore protocol) and store, the clients waiting on it, its flushes.

The core's output is applied by `core.driver.Driver`, the same driver the simulator runs: messages go
out at once (the core never claims more than is durable); one `store.flush()` at a time runs in this
group's worker thread and covers everything written before it started (group commit: all the appends
of the loop iterations meanwhile share the next one); then `on_flushed` releases what waited for
durability, and completions answer clients. A small flush, while flushes are fast, runs on the loop
instead, one per loop turn among the node's groups: handing it to the thread and back cost more than
the fdatasync itself (flush.py).

Only a failed disk (DiskError) stops the node. Any other error out of the core is logged, counted
(`core_errors`) and survived: it comes from input the network sent, and one bad message must not take a
member down. At shutdown an append the core was given is answered TERM_CHANGED (it may commit yet:
the client must not blindly retry), one it never saw NOT_LEADER (safe to send elsewhere).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import GroupConfig
from ..core.appends import AppendRequest
from ..core.driver import Driver
from ..core.ready import APPEND, CONFIG, READ_INDEX, Completion, Ready, RoleChange
from ..core.replica import PRIMARY_BACKUP, ReplicaCore
from ..core.role import Role
from ..errors import CorruptEntryError, DiskError, DiskFullError, ResponseCode
from ..ha.messages import FRAME_HEADER, HaTransfer
from ..ha.node import HaNode
from ..net.bodies import encode_error
from ..net.connection import Connection
from ..net.frames import Body, Frame
from ..net.schemas import APPEND_BATCH_RESPONSE, APPEND_RESPONSE, LEADERSHIP_TRANSFER_RESPONSE
from ..raft.messages import PushRequest
from ..raft.node import RaftNode
from ..store.file_store import store_dir
from .cadence import TickCadence
from .codec import PeerMessage
from .ends import Ends
from .events import ELECTION, RECOVERY, TRANSFER, Events
from .flush import Flusher, LoopTurn
from .members import GroupMembers
from .metrics import GroupStats
from .producer_saves import ProducerSaves
from .scrub import Scrubber
from .store import NodeStore

log = logging.getLogger("quorumlog.server")

SUCCESS = int(ResponseCode.SUCCESS)
# One proposal gathers the appends of one loop iteration, up to these bounds (the rest wait one more turn).
MAX_PROPOSAL_ENTRIES = 16384
MAX_PROPOSAL_BYTES = 8 << 20
# How soon a term or vote that found no file descriptor free is written again.
STABLE_RETRY_S = 0.1
# The same unexpected core error is logged with its traceback at most this often (it may recur every tick).
CORE_ERROR_LOG_INTERVAL_S = 60.0


def now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass(slots=True)
class _Append:
    """A client's APPEND or APPEND_BATCH waiting to be proposed or committed."""

    conn: Connection | None  # None: the node's own proposal (propose_local), answered to nobody
    frame_op: int
    request_id: int
    bodies: list[bytes]
    single: bool
    t0: float
    producer: int = 0  # the idempotent producer (0: none) and its sequence
    seq: int = -1
    expected_end: int | None = None  # a conditional append: the group's last client entry expected


class Group:
    """A group's core and its store, driven by the node's event loop."""

    def __init__(self, node_id: str, cfg: GroupConfig, data_dir: str, send: Callable[[PeerMessage], None],
                 on_fatal: Callable[[BaseException], None], flush_output: Callable[[], None] = lambda: None,
                 events: Events | None = None, loop_turn: LoopTurn | None = None,
                 scrub_interval_s: float = 24 * 3600.0) -> None:
        self.name = cfg.name
        self.cfg = cfg
        self.node_id = node_id
        self.events = events if events is not None else Events()
        self.store = NodeStore(store_dir(data_dir, cfg.name, node_id), cfg.store, repair=True, defer_stable=True)
        for note in self.store.notes:
            log.warning("group %s: store recovery: %s", cfg.name, note)
            self.events.record(RECOVERY, f"store recovery at start: {note}", cfg.name)
        self.store.on_cut = lambda kind, text: self.events.record(kind, text, self.name)
        try:
            # The server drives either core through ReplicaCore (mypy checks here that both satisfy it);
            # only the controller and the primary/backup gauges read the class it is, typed, from these.
            self.node: ReplicaCore
            self.raft_node: RaftNode | None = None
            self.ha_node: HaNode | None = None
            if cfg.ha.primary_backup:
                self.node = self.ha_node = HaNode(node_id, cfg.name, list(cfg.peers), self.store, cfg.ha, cfg.raft,
                                                  now_ms())
            else:
                self.node = self.raft_node = RaftNode(node_id, cfg.name, list(cfg.peers), self.store, cfg.raft,
                                                      random.Random(), joining=cfg.join)
        except BaseException:
            self.store.close()  # the node does not start: let go of the store (and its lock) now
            raise
        self.peers = dict(cfg.peers)  # follows the configuration in the log (members.py)
        self.members = GroupMembers(self)
        self._send = send
        self._on_fatal = on_fatal
        self._flush_output = flush_output  # writes what the node queued on its connections, now
        self._loop = asyncio.get_running_loop()
        # One thread per group: its flushes and checkpoints run one at a time, in order.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"flush-{cfg.name}")
        self.inbox: list[PeerMessage] = []
        self._stable_retrying = False  # the term and vote could not be written (logged once per stretch)
        self.appends: list[_Append] = []
        self._transfers: dict[int, tuple[Connection, Frame, str]] = {}  # request id -> asker, request, target
        self._next_rid = 1
        self.ends = Ends(self)  # END queries (ends.py): answered by READ_INDEX completions
        self.driver = Driver(self.node, self._send_message, self._complete, self._role_changed, self._start_flush,
                             self._persist_stable)
        self._checkpointing = False
        self._closed = False
        self.accepting = True  # False once shutdown began: new appends are sent elsewhere
        self._error_logged: dict[tuple[str, str], float] = {}
        self.stats = GroupStats()
        self.producer_saves = ProducerSaves(cfg.name, self.store)  # the producer table beside the log
        self.flusher = Flusher(self.store, self._executor, loop_turn if loop_turn is not None else LoopTurn(),
                               self.stats, self._flushed)
        self.commit_changed = asyncio.Event()
        self._last_commit = self.store.committed_index
        # Quiet groups are ticked less often (tick): once a heartbeat interval, the shorter of Raft's and
        # primary/backup's (a backup reports once an ha heartbeat interval, a primary beats as often).
        self.cadence = TickCadence(max(1, min(cfg.raft.heartbeat_interval_ms, cfg.ha.ha_heartbeat_interval_ms)))
        self.role_changes = 0
        self._last_leader: str | None = None
        self._was_recovering = self.recovering
        self._event_term = self.node.term  # the term of the last role change recorded (pre-votes keep it)
        self.expiry_cap: Callable[[], int] | None = None  # the last index expiry may drop (controller.py)
        self.scrubber = Scrubber(self.store, scrub_interval_s, time.monotonic(), self._scrub_found)

    # -- driving the core --------------------------------------------------------------------------
    def process(self) -> None:
        """Step the core with what arrived since the last iteration: peer messages, then client appends."""
        if self._closed:
            return
        if self.inbox:
            msgs, self.inbox = self.inbox, []
            end, streamed = self.store.end_index, False
            for m in msgs:
                if type(m) is PushRequest and m.data:
                    self.stats.bytes_in += len(m.data)
                    self.stats.entries_in += m.count
                elif type(m) is HaTransfer and len(m.frame) > FRAME_HEADER.size:
                    self.stats.bytes_in += len(m.frame) - FRAME_HEADER.size
                    streamed = True
            try:
                self.apply(self.node.step_batch(msgs, now_ms()))  # (node.py queues only this group's kind)
            except Exception as e:
                self.core_error("step", e)
            if streamed:  # a backup is streamed raw log bytes: count the entries they added
                self.stats.entries_in += max(0, self.store.end_index - end)
        if self.appends and not self._closed:
            self._propose()

    def tick(self, now: int | None = None) -> None:
        """The node's 10 ms tick; an idle group's less often (cadence.py)."""
        if self._closed:
            return
        if now is None:
            now = now_ms()
        s = self.store
        if not self.cadence.due(now, (s.end_index, s.committed_index, self.role_changes, self.node.quiesced),
                                bool(self.appends or self.ends.waiters or self._transfers)):
            return
        try:
            self.apply(self.node.tick(now))
        except Exception as e:
            self.core_error("tick", e)
        if self.recovering != self._was_recovering:
            self._was_recovering = not self._was_recovering
            self.events.record(RECOVERY, "recovering: fetching the entries this replica may lack from its peers"
                               if self._was_recovering else "recovered: every entry it lacked fetched again", self.name)

    def peer_down(self, peer: str, now: int) -> None:
        """`peer`'s node has been silent for an election timeout (node.py): a quiesced core may wake."""
        try:
            self.apply(self.node.peer_down(peer, now))
        except Exception as e:
            self.core_error("peer_down", e)
        self.cadence.stir(now)

    @property
    def recovering(self) -> bool:
        """What status, metrics and events report: may lack entries it acknowledged. A primary/backup core
        holds a pristine store as recovering until the controller clears it; that wait is reported as
        joining, as a Raft store's probe is (a new group never recovers)."""
        return self.node.recovering and not self.node.joining

    def core_error(self, call: str, e: Exception) -> None:
        """An exception out of the core (or applying its output): fatal for a failed disk only."""
        if isinstance(e, DiskError):
            self._on_fatal(e)
            return
        key = (call, type(e).__name__)
        self.stats.core_errors[key] += 1
        now = time.monotonic()
        last = self._error_logged.get(key)
        if last is None or now - last >= CORE_ERROR_LOG_INTERVAL_S:
            self._error_logged[key] = now
            log.error("group %s: %s failed (%d times so far), the node goes on: %s: %s", self.name, call,
                      self.stats.core_errors[key], type(e).__name__, e, exc_info=e)

    def _propose(self) -> None:
        """Hand the queued appends to the core in one call (one run in the log, one flush): the core judges
        each (producer, expected end) and answers each. Each request's id is its _Append, so the core's
        pending appends are the one table of what waits for an answer."""
        requests: list[AppendRequest] = []
        count = size = 0
        queued = self.appends
        taken = 0
        for a in queued:
            if requests and (count + len(a.bodies) > MAX_PROPOSAL_ENTRIES or size > MAX_PROPOSAL_BYTES):
                break
            requests.append(AppendRequest(a, a.bodies, a.producer, a.seq, a.expected_end))
            count += len(a.bodies)
            size += sum(map(len, a.bodies))
            taken += 1
        self.appends = queued[taken:]
        try:
            ready = self.node.propose_many(requests, now_ms(), time.time_ns() // 1_000_000)
        except Exception as e:
            # The store may hold the entries already: an uncertain outcome, never a plain retry.
            for r in requests:
                _respond(r.request_id, encode_error(ResponseCode.TERM_CHANGED, f"append failed in group "
                         f"{self.name} on {self.node_id}: {type(e).__name__}: {e}", None))
            self.core_error("propose", e)
            return
        self.stats.entries_in += count
        self.stats.bytes_in += size
        try:
            self.apply(ready)
        except Exception as e:
            self.core_error("propose", e)

    def apply(self, ready: Ready) -> None:
        """Hand `ready` to the driver, then wake readers waiting for the commit index."""
        self.driver.apply(ready, now_ms())
        self._note_commit()
        self.members.follow()

    def _persist_stable(self) -> None:
        """The driver's persist: a term, vote or recovery flag the core just took is written in the worker
        thread, queued before any flush started after it (the thread runs them in order); the driver holds
        the messages meanwhile."""
        if self._closed:
            return
        self._loop.run_in_executor(self._executor, self.store.persist_stable).add_done_callback(self._stable_saved)

    def _stable_saved(self, fut: asyncio.Future[None]) -> None:
        if self._closed:
            return
        error = fut.exception()
        if isinstance(error, DiskFullError):  # no descriptor or no space free: try again soon, still holding
            if not self._stable_retrying:
                log.warning("group %s: cannot write the %s yet (trying again every %.1f s): %s",
                            self.name, self._stable_what, STABLE_RETRY_S, error)
            self._stable_retrying = True
            self._loop.call_later(STABLE_RETRY_S, self._persist_stable)
            return
        if error is not None:  # the store failed its fsync: fail-stop
            self._on_fatal(error)
            return
        if self._stable_retrying:
            self._stable_retrying = False
            log.warning("group %s: the %s are written", self.name, self._stable_what)
        self.driver.persisted()
        self._flush_output()

    def _note_commit(self) -> None:
        committed = self.store.committed_index
        if committed != self._last_commit:
            self._last_commit = committed
            self.commit_changed.set()
            self.commit_changed = asyncio.Event()

    def _note_closed(self) -> None:
        """Wake whatever waits on the commit index (a read at a min_index, server/waits.py): it finds the group
        closed and answers so."""
        self.commit_changed.set()
        self.commit_changed = asyncio.Event()

    def _send_message(self, m: PeerMessage) -> None:
        if type(m) is PushRequest and m.data:
            self.stats.push_bytes_out += len(m.data)
        elif type(m) is HaTransfer and len(m.frame) > FRAME_HEADER.size:
            self.stats.push_bytes_out += len(m.frame) - FRAME_HEADER.size
        self._send(m)

    @property
    def _stable_what(self) -> str:
        """What the store's stable state holds, in this group's words."""
        return "epoch and primary" if self.node.replication == PRIMARY_BACKUP else "term and vote"

    def _role_changed(self, ch: RoleChange) -> None:
        self.role_changes += 1
        if ch.leader_id is not None and ch.leader_id != self._last_leader:
            self._last_leader = ch.leader_id
            self.stats.leader_changes += 1
        # A primary/backup group in its own words (primary, backup, epoch): its roles only map onto Raft's.
        term, leads, follows = ("epoch", "primary", "backup") if self.node.replication == PRIMARY_BACKUP else \
            ("term", "leader", "follower")
        role = {Role.LEADER: leads, Role.FOLLOWER: follows}.get(ch.role, ch.role.name.lower())
        log.info("group %s: %s in %s %d, %s %s", self.name, role, term, ch.term, leads, ch.leader_id or "unknown")
        if ch.role == Role.LEADER:
            text = f"became {leads} in {term} {ch.term}"
        elif ch.role == Role.CANDIDATE:  # a pre-vote round has not raised the term yet
            text = f"candidate in {term} {ch.term}: {'asking for votes' if ch.term > self._event_term else 'pre-vote'}"
        else:
            text = f"{follows} in {term} {ch.term}, {leads} {ch.leader_id or 'unknown'}"
        self._event_term = ch.term
        self.events.record(ELECTION, text, self.name)

    def _complete(self, c: Completion) -> None:
        if c.kind == APPEND:
            self._complete_append(c)
        elif c.kind == CONFIG:
            self.members.complete(c)
        elif c.kind == READ_INDEX:
            self.ends.complete(c)
        else:
            self._complete_transfer(c)

    def _start_flush(self) -> None:
        """The driver's flush (flush.py); what this turn sent (pushes, acks) leaves before the disk is waited on."""
        self._flush_output()
        self.flusher.start()

    def _flushed(self, durable: int, error: BaseException | None, t0: float) -> None:
        if self._closed:
            return
        if error is not None:  # a failed fdatasync: the store is failed-stop, and so is this node
            self._on_fatal(error)
            return
        self.stats.flushes += 1
        self.stats.fsync_latency.observe(time.perf_counter() - t0)
        now = now_ms()
        try:
            self.driver.flushed(durable, now)
        except Exception as e:
            self.core_error("on_flushed", e)
            if not isinstance(e, DiskError) and not self._closed:
                self.driver.flush_if_behind(now)
        self._note_commit()
        self._flush_output()

    # -- completions -------------------------------------------------------------------------------
    def _complete_append(self, c: Completion) -> None:
        a: _Append = c.request_id
        now = time.perf_counter()
        st = self.stats
        st.append_latency.observe(now - a.t0)
        if c.code == SUCCESS:
            st.commit_latency.observe(now - a.t0)
            positions = c.positions
            if a.single:
                body = APPEND_RESPONSE.ok(c.first_index, c.term, positions[0])
            else:
                body = APPEND_BATCH_RESPONSE.ok(c.first_index, c.term, list(positions))
            _respond(a, body)
            return
        hint = c.leader_id if c.leader_id != self.node_id else None
        # The reason says where; the code (which clients show by name before it) says what.
        if c.detail is not None:  # EXPECTED_END_MISMATCH: the actual last entry, for the client to read
            body = encode_error(c.code, f"the group's last entry is {c.detail} (group {self.name} on "
                                f"{self.node_id})", hint, c.detail)
        elif c.reason is not None:  # why (whose disks are full), then where
            body = encode_error(c.code, f"{c.reason} (group {self.name} on {self.node_id})", hint)
        else:
            body = encode_error(c.code, f"group {self.name} on {self.node_id}", hint)
        _respond(a, body)

    def _complete_transfer(self, c: Completion) -> None:
        waiter = self._transfers.pop(c.request_id, None)
        if waiter is None:
            return
        conn, frame, target = waiter
        outcome = f"done, {c.leader_id} leads in term {c.term}" if c.code == SUCCESS else _code_name(c.code)
        self.events.record(TRANSFER, f"leadership transfer: {outcome}", self.name)
        if c.code == SUCCESS:
            conn.respond(frame, LEADERSHIP_TRANSFER_RESPONSE.ok(c.leader_id, c.term))
            return
        if c.reason is None and c.code == int(ResponseCode.UNKNOWN_MEMBER):
            text = f"{target!r} is not a member of group {self.name}"
        else:
            where = f"transfer to {target} in group {self.name}"
            text = f"{c.reason} ({where})" if c.reason else where
        conn.respond_error(frame, c.code, text, c.leader_id)

    # -- client requests ---------------------------------------------------------------------------
    def enqueue_append(self, conn: Connection, frame: Frame, bodies: list[bytes], single: bool, producer: int = 0,
                       seq: int = -1, expected_end: int | None = None) -> bool:
        """Queue an append for the next proposal; False (answered already) once shutdown began."""
        a = _Append(conn, frame.op, frame.request_id, bodies, single, time.perf_counter(), producer, seq,
                    expected_end)
        if not self.accepting:
            _respond(a, self._shutting_down(ResponseCode.NOT_LEADER))
            return False
        self.appends.append(a)
        return True

    def propose_local(self, body: bytes) -> bool:
        """Append `body` here and now, on this group's leader, answered to nobody (the controller's commands
        to its own group: its entry follows the log's last at once); False when not the leader."""
        if self._closed or not self.accepting or self.node.role != Role.LEADER:
            return False
        a = _Append(None, 0, 0, [body], True, time.perf_counter())
        try:
            self.apply(self.node.propose_many([AppendRequest(a, a.bodies)], now_ms(), time.time_ns() // 1_000_000))
        except Exception as e:
            self.core_error("propose", e)
        return True

    def transfer(self, conn: Connection, frame: Frame, target: str) -> None:
        if self.node.replication == PRIMARY_BACKUP:  # a new primary takes a new epoch: no hand-over
            conn.respond_error(frame, ResponseCode.UNSUPPORTED, f"group {self.name} is a primary/backup group: "
                               f"use promote (quorumlog promote --group {self.name} --to {target})", self.leader_id)
            return
        self.events.record(TRANSFER, f"leadership transfer to {target} requested", self.name)
        rid = self.next_request_id()
        self._transfers[rid] = (conn, frame, target)
        self.apply(self.node.transfer_leader(target, now_ms(), request_id=rid))

    def next_request_id(self) -> int:
        rid = self._next_rid
        self._next_rid += 1
        return rid

    @property
    def leader_id(self) -> str | None:
        return self.node.leader_id

    def metadata(self) -> tuple[str | None, int]:
        leader = self.node.leader_id
        if not self.accepting and leader == self.node_id:
            leader = None  # shutting down: send clients to find the next leader, not back here
        return leader, self.node.term

    def status(self) -> dict[str, Any]:
        """The /status and STATUS document of this group."""
        s = self.store
        node = self.node
        doc: dict[str, Any] = {
            "group": self.name, "node": self.node_id, "role": node.role.name.lower(), "term": node.term,
            "leader": node.leader_id, "begin_index": s.begin_index, "end_index": s.end_index,
            "committed_index": s.committed_index, "durable_index": s.durable_index,
            "recovering": self.recovering, "joining": node.joining, "quiet": node.quiesced,
            "pending_appends": self.pending_appends,
            "producers": len(node.producers), "disk_full": s.disk_full,
            "peers": {pid: addr for pid, addr in self.peers.items()},
            "stats": self.stats.doc(), "scrub": self.scrubber.doc(),
        }
        doc.update(node.status())  # (primary/backup: epoch, primary, in-sync set...)
        doc.update(self.members.status())  # (Raft: the configuration, a change pending)
        if node.role == Role.LEADER:
            doc["peer_watermarks"] = {p: node.peer_match(p) for p in self.peers if p != self.node_id}
            doc["peer_lag"] = {p: max(0, s.end_index - m) for p, m in doc["peer_watermarks"].items()}
            full = node.peers_disk_full()  # (Raft: followers that refused for a full disk)
            if full is not None:
                doc["peers_disk_full"] = full
        return doc

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending_appends(self) -> int:
        return len(self.appends) + self.proposals_waiting

    # -- housekeeping ------------------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Persist end/committed in the worker thread (never alongside a flush: one thread, in order)."""
        if self._closed or self._checkpointing:
            return
        self._checkpointing = True

        def done(f: concurrent.futures.Future[None]) -> None:
            self._checkpointing = False
            error = f.exception()
            if isinstance(error, DiskFullError):  # the old checkpoint stands; the next interval tries again
                log.warning("group %s: checkpoint skipped: %s", self.name, error)
            elif error is not None and not self._closed:
                self._on_fatal(error)

        blob = self.producer_saves.take(self.node.producers)

        def job() -> None:
            self.store.checkpoint()
            self.producer_saves.save(blob)

        self._loop.run_in_executor(self._executor, job).add_done_callback(done)  # type: ignore[arg-type]

    def expire(self) -> int:
        """Drop old segments every member holds (the leader knows; a follower keeps to its commit). A
        member silent for longer than member_timeout_hours no longer holds expiry back: it is reset to
        the leader's first entry when it returns (docs/operations.md)."""
        cfg = self.cfg.store
        hours = cfg.member_timeout_hours if cfg.member_timeout_hours is not None else cfg.file_reserved_hours
        safe = self.node.expiry_safe_index(now_ms(), int(hours * 3_600_000))
        if self.expiry_cap is not None:  # a controller group keeps its last snapshot (ha/record.py)
            safe = min(safe, self.expiry_cap())
        return self.store.expire(safe, time.time())

    def on_corruption(self, error: CorruptEntryError) -> None:
        """A client read met a corrupt entry of this replica: cut there and re-fetch from the peers."""
        if self._closed:
            return
        log.error("group %s: %s; cutting the log there to fetch it again (a primary/backup primary hands off "
                  "first)", self.name, error)
        self.apply(self.node.report_corruption(error, now_ms()))

    def _scrub_found(self, error: CorruptEntryError) -> None:
        self.events.record(RECOVERY, f"the scrub found a damaged entry: {error}", self.name)
        self.on_corruption(error)

    # -- shutdown ----------------------------------------------------------------------------------
    def _shutting_down(self, code: ResponseCode) -> bytes:
        return encode_error(code, f"node {self.node_id} is shutting down (group {self.name})", None)

    def stop_appends(self) -> None:
        """Shutdown begins: refuse new appends and answer the queued ones, which the core never saw,
        NOT_LEADER (the client sends them to the next leader). Proposed ones may still commit."""
        self.accepting = False
        body = self._shutting_down(ResponseCode.NOT_LEADER)
        queued, self.appends = self.appends, []
        for a in queued:
            _respond(a, body)

    @property
    def proposals_waiting(self) -> int:
        """Appends handed to the core and not answered yet."""
        return len(self.node.waiting_requests())

    async def close(self) -> None:
        """Answer what still waits, then flush and checkpoint (store.close) in the worker thread.

        An append already proposed gets TERM_CHANGED: its entries may be on other members and commit
        under the next leader, so only the client may decide to send it again. One never proposed gets
        NOT_LEADER, safe to retry. The answers are queued on their connections before this returns;
        the node closes connections later, and a close writes out what is queued first.
        """
        if self._closed:
            return
        self.stop_appends()
        self._closed = True
        self._note_closed()
        body = encode_error(ResponseCode.TERM_CHANGED, f"node {self.node_id} shut down before the append was "
                            f"known committed (group {self.name}); it may still commit", None)
        for a in self.node.waiting_requests():
            _respond(a, body)
        for conn, frame, _target in self._transfers.values():
            conn.respond_error(frame, ResponseCode.NETWORK_ERROR, f"node {self.node_id} is shutting down")
        self._transfers.clear()
        self.ends.close()
        blob = self.producer_saves.take(self.node.producers, closing=True)
        await self._loop.run_in_executor(self._executor, self.producer_saves.save, blob)
        await self._loop.run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=True)


def _respond(a: _Append, body: Body) -> None:
    if a.conn is not None:
        a.conn.respond(Frame(0, a.frame_op, a.request_id, memoryview(b"")), body)


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)
