"""How often a group's core is ticked (Group.tick). The node ticks every 10 ms, but a group whose log, commit
index, roles and quiet have not moved for IDLE_AFTER_MS, with nothing waiting, is ticked once a heartbeat
interval: a leader's next heartbeat is due an interval after the tick that sent the last, a follower's
election timeout is several of them, and idle groups' ticks were half a node's idle CPU. A quiet Raft core
(raft/quiesce.py) runs no timer at all: once a second. Anything moving has it ticked every 10 ms again at
once; a core woken out of quiet, by a read say, must heartbeat from its next tick, not a second later."""

from __future__ import annotations

IDLE_AFTER_MS = 1000
QUIET_TICK_MS = 1000


class TickCadence:
    """One group's: what it last saw, and until when it is ticked every time."""

    __slots__ = ("idle_tick_ms", "_seen", "_active_until", "_next_idle_tick")

    def __init__(self, idle_tick_ms: int) -> None:
        self.idle_tick_ms = idle_tick_ms
        self._seen: tuple[int, int, int, bool] | None = None  # end, commit, role changes, quiet
        self._active_until = 0
        self._next_idle_tick = 0

    def due(self, now: int, seen: tuple[int, int, int, bool], waiting: bool) -> bool:
        """Whether to tick the core now, given its state `seen` and whether anything waits on it."""
        if seen == self._seen and not waiting:
            if now >= self._active_until:
                if now < self._next_idle_tick:
                    return False
                self._next_idle_tick = now + (QUIET_TICK_MS if seen[3] else self.idle_tick_ms)
        else:
            self._seen = seen
            self._active_until = now + IDLE_AFTER_MS
        return True

    def stir(self, now: int) -> None:
        """Tick every time again for a while (a quiet follower told its leader's node fell silent campaigns
        within its back-off)."""
        self._active_until = now + IDLE_AFTER_MS
