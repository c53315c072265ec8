"""The node's periodic work (a NodeServer mixin): the 10 ms tick of every group and the controller, and
once a second or so checkpoints, segment expiry, the background scrub, and the limits hit or HELLOs
refused since the last look, as events."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from ..config import NodeConfig
from ..errors import QuorumLogError
from .events import REFUSAL, CounterWatch, Events
from .group import now_ms
from .liveness import PeerLiveness
from .metrics import Histogram

if TYPE_CHECKING:
    from ..net.server import Server
    from .group import Group
    from .peers import PeerLinks

log = logging.getLogger("quorumlog.server")

TICK_S = 0.01
LIVENESS_MAX_LAG_S = 0.05  # a tick this late judges no peer's silence (see _ticker)
HOUSEKEEPING_S = 1.0
EXPIRE_EVERY_S = 10.0


class Housekeeping:
    """NodeServer's periodic tasks (see the module docstring)."""

    if TYPE_CHECKING:
        cfg: NodeConfig
        groups: dict[str, Group]
        controller: Any
        server: Server | None
        links: PeerLinks
        events: Events
        loop_lag: Histogram
        liveness: PeerLiveness
        _counters: CounterWatch

    async def _ticker(self) -> None:
        # Group.tick survives core errors itself (only a DiskError stops the node, through _fatal_error).
        # How late each tick wakes is the event loop's lag: the time any frame may wait to be handled.
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            lag = max(0.0, loop.time() - due)
            self.loop_lag.observe(lag)
            now = now_ms()
            for g in self.groups.values():
                g.tick(now)
            live = self.liveness
            if live.ping_due(now):  # (once a heartbeat interval: the quiet groups' liveness)
                self.links.ping()
                # A tick that woke late judges no peer: this node stalled, and the loop runs timers before it
                # reads what its sockets hold (uvloop), so the peers' pings of the stall are still unread.
                if lag < LIVENESS_MAX_LAG_S:
                    live.wake_quiet(self.groups.values(), [*self.links.links, *self.links.inbound], now)
            if self.controller is not None:
                try:
                    self.controller.tick()
                except Exception:  # a bug: log it, keep the node (and its Raft groups) running
                    log.exception("controller tick failed")

    async def _housekeeping(self) -> None:
        next_cp = {name: 0.0 for name in self.groups}
        next_expire = time.monotonic() + EXPIRE_EVERY_S
        while True:
            await asyncio.sleep(HOUSEKEEPING_S / 10)
            now = time.monotonic()
            self._watch_counters()
            for g in self.groups.values():
                if now >= next_cp[g.name]:
                    next_cp[g.name] = now + g.cfg.store.checkpoint_interval_ms / 1000
                    g.checkpoint()
            self._scrub(now, HOUSEKEEPING_S / 10)
            if now >= next_expire:
                next_expire = now + EXPIRE_EVERY_S
                for g in self.groups.values():
                    try:
                        removed = g.expire()
                    except QuorumLogError as e:
                        log.warning("group %s: expiry failed: %s", g.name, e)
                        continue
                    except Exception:  # a bug: keep checkpointing and expiring the other groups
                        log.exception("group %s: expiry failed", g.name)
                        continue
                    if removed:
                        log.info("group %s: expired %d entries", g.name, removed)

    def _scrub(self, now: float, period_s: float) -> None:
        """One step of the background scrub (server/scrub.py): `scrub_bytes_per_s` over the groups scrubbing."""
        due = [g for g in self.groups.values() if g.scrubber.due(now) and not g.closed]
        if not due or self.cfg.scrub_bytes_per_s <= 0:
            return
        budget = int(self.cfg.scrub_bytes_per_s * period_s) // len(due)
        for g in due:
            try:
                g.scrubber.step(now, budget)
            except QuorumLogError as e:  # a read error other than damage (say, EIO): the next pass tries again
                log.warning("group %s: scrub step failed: %s", g.name, e)
            except Exception:  # a bug: log it, keep the node and the other groups' scrubs going
                log.exception("group %s: scrub step failed", g.name)

    def _watch_counters(self) -> None:
        """Limits hit and HELLOs a peer refused since the last look become events."""
        server, watch = self.server, self._counters
        if server is not None:
            for limit, what in (("connections", "connections refused: max_connections reached"),
                                ("handshakes", "connections turned away in their handshake: max_handshakes or "
                                               "max_handshakes_per_address reached"),
                                ("accept_errors", "accepts failed: out of file descriptors or memory"),
                                ("requests", "connections held unread: max_requests_per_connection reached"),
                                ("output", "connections held unread: max_output_bytes_per_connection reached")):
                n = watch.increase(f"limit {limit}", server.limits[limit])
                if n:
                    self.events.record(REFUSAL, f"{n} {what}")
        for pid, ep in self.links.links.items():
            if watch.increase(f"refused by {pid}", ep.refusals):
                self.events.record(REFUSAL, f"peer {pid} refused this node's HELLO: {ep.last_error}")
