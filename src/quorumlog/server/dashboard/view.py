"""The whole cluster as one node sees it: this node's status and every other member's, fetched with
STATUS over the quorumlog protocol, folded into one document for the dashboard (`/api/cluster`).

Each member is asked concurrently on a connection of its own that stays open between polls (a
reconnecting Endpoint, with the credentials the node's peer links use: the shared secret, mutual TLS
with this node's certificate). A member that is not connected, refuses, or does not answer within
STATUS_TIMEOUT_S is shown as down for that poll; it never holds the others up. Pages polling at the
same time share one round of requests. The connections are closed once no page has asked for a while.

The members are those of this node's groups as it follows them: a Raft group's come from the
configuration in its log (server/members.py), so a member added is asked from then on, at the address the
change gave it, a member moved is asked at its new address, and a member removed is no longer shown. Each
Raft group's replicas are its configuration's voters and learners (the leader's view first), learners
marked, with a change whose CONFIG entry is not committed yet shown as pending.

Everything a member sends is checked for its type before use (docs.py): a member running another
version, or a broken one, shows as such instead of breaking the page.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ...net.bodies import decode_response
from ...net.endpoint import Endpoint
from ...net.ops import Op
from ...net.schemas import STATUS_REQUEST, STATUS_RESPONSE
from ..peers import split_address
from .docs import GroupDoc, NodeDoc, parse_status
from .history import History

if TYPE_CHECKING:
    from ..node import NodeServer

STATUS_TIMEOUT_S = 1.0  # a member slower than this is shown as down for this poll
MIN_INTERVAL_S = 0.5  # pages polling within this of the last round get its document
IDLE_CLOSE_S = 60.0  # no page asked for this long: the connections to the members are closed
LAGGING_ENTRIES = 1000  # a follower this far behind the leader's end ...
LAGGING_SAMPLES = 3  # ... in this many successive polls is marked lagging (a burst is not)
MAX_EVENTS = 150
VIEW_EVENTS = 50  # members seen going down or coming back, by this node


class ClusterView:
    """Polled by the dashboard's page through `snapshot()`; one per admin server."""

    def __init__(self, node: NodeServer) -> None:
        self.node = node
        self.history = History()
        self._endpoints: dict[str, tuple[str, Endpoint]] = {}  # member -> (the address it was made for, it)
        self._addresses: dict[str, str] = {}  # the members of the last round, at their addresses
        self._last: dict[str, Any] | None = None
        self._last_at = 0.0
        self._round: asyncio.Future[dict[str, Any]] | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._closing: asyncio.Task[None] | None = None
        self._closing_eps: set[asyncio.Future[None]] = set()  # endpoints of members that moved, closing
        self._known: dict[str, NodeDoc] = {}  # each member's last good status (its events once it is down)
        self._up: dict[str, bool] = {}
        self._view_events: deque[dict[str, Any]] = deque(maxlen=VIEW_EVENTS)

    # -- polling -----------------------------------------------------------------------------------
    async def snapshot(self) -> dict[str, Any]:
        """The cluster document: a fresh round of STATUS requests, or the last one if it is recent."""
        loop = asyncio.get_running_loop()
        self._touch(loop)
        if self._last is not None and loop.time() - self._last_at < MIN_INTERVAL_S:
            return self._last
        if self._round is None:
            self._round = asyncio.ensure_future(self._collect())
            self._round.add_done_callback(self._round_done)
        # Shielded: a page that goes away mid-round does not cancel the round other pages wait for.
        return await asyncio.shield(self._round)

    def _round_done(self, fut: asyncio.Future[dict[str, Any]]) -> None:
        self._round = None
        if not fut.cancelled() and fut.exception() is None:
            self._last = fut.result()
            self._last_at = asyncio.get_running_loop().time()

    def _members(self) -> dict[str, str]:
        """Whom to ask, at which address: the members of this node's groups as it follows them (a Raft
        group's configuration, from its log), and this node."""
        node = self.node
        out: dict[str, str] = {}
        for g in node.groups.values():
            out.update(g.peers)
        if not out:  # (no group open yet)
            out = dict(node.peer_addresses)
        out.setdefault(node.node_id, node.peer_addresses.get(node.node_id, ""))
        return out

    async def _collect(self) -> dict[str, Any]:
        node = self.node
        self._addresses = self._members()
        members = sorted(self._addresses)
        others = [m for m in members if m != node.node_id]
        answers = await asyncio.gather(*(self._fetch(m) for m in others))
        docs: dict[str, NodeDoc] = {node.node_id: parse_status(node.node_id, node.status())}
        errors: dict[str, str] = {}
        for m, (doc, error) in zip(others, answers, strict=True):
            if doc is not None:
                docs[m] = doc
            else:
                errors[m] = error or "no answer"
        self._note_up_down(members, docs, errors)
        return self._document(members, docs, errors)

    async def _fetch(self, member: str) -> tuple[NodeDoc | None, str | None]:
        ep = self._endpoint(member)
        if not ep.connected and ep.last_error is not None:
            return None, _reason(ep.last_error)  # it failed last time and is not back: say so at once
        try:
            frame = await ep.request(Op.STATUS, STATUS_REQUEST.encode(None), timeout=STATUS_TIMEOUT_S)
            status = decode_response(STATUS_RESPONSE, frame.body).status
        except Exception as e:  # whatever a member does (refuses, hangs, sends garbage) is its state, not ours
            return None, _reason(e)
        doc = parse_status(member, status)
        if doc.node != member:
            return None, f"answered as node {doc.node!r}: check its address in the config"
        return doc, None

    def _endpoint(self, member: str) -> Endpoint:
        address = self._address(member)
        known = self._endpoints.get(member)
        if known is not None and known[0] != address:  # the member moved (a membership change's set-address)
            del self._endpoints[member]
            self._closing_eps.add(task := asyncio.ensure_future(known[1].close()))
            task.add_done_callback(self._closing_eps.discard)
            known = None
        if known is None:
            cfg = self.node.cfg
            host, port = split_address(address)
            # The node's own identity and credentials: with mutual TLS its certificate names it.
            ep = Endpoint(host, port, cluster=cfg.cluster, node_id=self.node.node_id, secret=cfg.secret,
                          max_frame_bytes=cfg.max_frame_bytes, connect_timeout=STATUS_TIMEOUT_S,
                          backoff_initial=0.05, backoff_max=1.0, name=f"{member} (dashboard)",
                          expect_node=member)
            if cfg.tls_cert is not None:
                from ...tls import client_context

                ep.use_tls(client_context(cfg.tls_ca or "", cfg.tls_cert, cfg.tls_key), expect_identity=member)
            self._endpoints[member] = (address, ep)
            ep.start()
            return ep
        return known[1]

    def _address(self, member: str) -> str:
        return self._addresses.get(member) or self.node.peer_addresses.get(member, "")

    def _touch(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = loop.call_later(IDLE_CLOSE_S, self._on_idle)

    def _on_idle(self) -> None:
        self._idle = None
        self._closing = asyncio.ensure_future(self._close_endpoints())

    async def _close_endpoints(self) -> None:
        eps, self._endpoints = [ep for _address, ep in self._endpoints.values()], {}
        for ep in eps:
            with contextlib.suppress(Exception):
                await ep.close()

    async def close(self) -> None:
        """Close every connection to the members (the admin server is stopping)."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._round is not None:
            self._round.cancel()
        await self._close_endpoints()

    # -- the document ------------------------------------------------------------------------------
    def _note_up_down(self, members: list[str], docs: dict[str, NodeDoc], errors: dict[str, str]) -> None:
        """An event when a member goes down or comes back, when one is down at the first look (nothing else
        would say it), and when one leaves the membership."""
        for m in members:
            up = m in docs
            if up:
                self._known[m] = docs[m]
            was = self._up.get(m)
            self._up[m] = up
            if was != up and (was is not None or not up):
                self._view_event(f"{m} answers again" if up else f"{m} is down: {errors.get(m, '')}")
        for m in [m for m in self._up if m not in members]:
            del self._up[m]
            self._view_event(f"{m} is no longer a member")

    def _view_event(self, text: str) -> None:
        self._view_events.append({"t": round(time.time(), 3), "kind": "node", "group": None,
                                  "text": f"seen from {self.node.node_id}: {text}", "count": 1,
                                  "node": self.node.node_id})

    def _document(self, members: list[str], docs: dict[str, NodeDoc], errors: dict[str, str]) -> dict[str, Any]:
        hist = self.history
        nodes = []
        for m in members:
            doc = docs.get(m)
            entry: dict[str, Any] = {"id": m, "address": self._address(m), "self": m == self.node.node_id,
                                     "up": doc is not None, "error": errors.get(m)}
            if doc is not None:
                series = hist.node(m)
                series.add(doc.uptime_s, {}, doc.hists)
                entry.update(uptime_s=doc.uptime_s, admin=doc.admin, loop_lag_s=series.quantiles("loop_lag"),
                             peers_connected=doc.peers_connected)
            nodes.append(entry)
        groups = [self._group(name, members, docs) for name in self._group_names(docs)]
        for g in groups:
            for r in g["replicas"]:
                if r.get("role") == "leader" and r["node"] == g["leader"]:
                    next(n for n in nodes if n["id"] == r["node"]).setdefault("leads", []).append(g["name"])
        return {"cluster": self.node.cfg.cluster, "served_by": self.node.node_id, "generated_at": time.time(),
                "nodes": nodes, "groups": groups, "events": self._events(docs)}

    def _group_names(self, docs: dict[str, NodeDoc]) -> list[str]:
        names = dict.fromkeys(g.name for g in self.node.cfg.groups)
        for d in docs.values():
            names.update(dict.fromkeys(d.groups))
        return list(names)

    def _group(self, name: str, members: list[str], docs: dict[str, NodeDoc]) -> dict[str, Any]:
        hosting = {m: d.groups[name] for m, d in docs.items() if name in d.groups}
        leaders = [g for g in hosting.values() if g.role == "leader"]
        leader = max(leaders, key=lambda g: g.term) if leaders else None
        # A Raft group's members are those of its configuration: the leader's, else this node's, else any
        # member's (each follows the last CONFIG entry in its log, which the leader has first).
        shown = next((g for g in (leader, hosting.get(self.node.node_id), *hosting.values())
                      if g is not None and g.voters is not None), None)
        cfg = next((g for g in self.node.cfg.groups if g.name == name), None)
        if shown is not None:
            assert shown.voters is not None
            own = [*shown.voters, *shown.learners]
            if leader is not None and leader.node not in own:
                own.append(leader.node)  # it leads until its own removal commits
        else:  # as this node's config has them (a group it does not host: every node answering)
            own = list(cfg.peers) if cfg is not None else [m for m in members if m in hosting]
        learners = set(shown.learners) if shown is not None else set()
        here = {m: hosting[m] for m in own if m in hosting}
        replicas = []
        for m in sorted(own):
            g = here.get(m)
            if g is None:  # down, or up without this group (its config differs)
                replicas.append({"node": m, "up": m in docs, "missing": m in docs, "learner": m in learners})
                continue
            replicas.append({**self._replica(m, g, leader, docs[m].uptime_s), "learner": m in learners})
        hist = self.history
        rates: dict[str, float | None] = {"entries_s": None, "bytes_s": None}
        if leader is not None:
            series = hist.replica(leader.node, name)
            rates = {"entries_s": series.rate("entries_in"), "bytes_s": series.rate("bytes_in")}
        return {"name": name, "replication": next((g.replication for g in here.values()), "raft"),
                "leader": leader.node if leader is not None else None,
                "term": max((g.term for g in here.values()), default=None), **rates,
                "spark": hist.group_point(name, rates), "replicas": replicas,
                "voters": list(shown.voters) if shown is not None and shown.voters is not None else None,
                "learners": sorted(learners),
                "change_pending": shown is not None and shown.change_pending,
                "change_asked": shown.change_asked if shown is not None else None}

    def _replica(self, m: str, g: GroupDoc, leader: GroupDoc | None, uptime_s: float) -> dict[str, Any]:
        series = self.history.replica(m, g.name)
        series.add(uptime_s, {"entries_in": g.entries_in, "bytes_in": g.bytes_in}, g.hists)
        lag: int | None = None
        if leader is not None:
            lag = 0 if leader.node == m else leader.peer_lag.get(m, max(0, leader.end - g.end))
        series.flagged = series.flagged + 1 if lag is not None and lag > LAGGING_ENTRIES else 0
        return {"node": m, "up": True, "role": g.role, "term": g.term, "leader": g.leader, "begin": g.begin,
                "end": g.end, "committed": g.committed, "durable": g.durable, "pending": g.pending,
                "recovering": g.recovering, "lag": lag, "lagging": series.flagged >= LAGGING_SAMPLES,
                "entries_s": series.rate("entries_in"), "bytes_s": series.rate("bytes_in"),
                "fsync_s": series.quantiles("fsync"), "commit_s": series.quantiles("commit")}

    def _events(self, docs: dict[str, NodeDoc]) -> list[dict[str, Any]]:
        """Newest first. Each source lists its events oldest first (a node in the order it recorded them):
        its position breaks a tie of timestamps, so events of one millisecond keep their real order."""
        ranked: list[tuple[float, int, dict[str, Any]]] = [(e["t"], i, e) for i, e in enumerate(self._view_events)]
        for m, d in self._known.items():
            live = docs.get(m, d)
            ranked += [(e["t"], i, {**e, "node": m}) for i, e in enumerate(live.events[-MAX_EVENTS:])]
        ranked.sort(key=lambda r: (r[0], r[1]), reverse=True)
        return [e for _t, _i, e in ranked[:MAX_EVENTS]]


def _reason(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) <= 200 else text[:199] + "…"
