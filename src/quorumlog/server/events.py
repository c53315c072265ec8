"""A node's recent notable events (elections, transfers, recoveries, resets, refusals): a small bounded
ring, newest last, exposed in the node's status document so that any member's dashboard can show them.

Recording is cheap and happens where the thing happens (group.py, node.py, store cuts). A burst of the
same event (a misconfigured peer refused every half second, a client denied in a loop) is folded into
one entry with a count; refusals, which anyone who reaches the port can cause, are kept in a ring of
their own, so neither can push the rare, interesting events out. Every text is escaped (untrusted.py):
parts of it come from the network.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..untrusted import shown

# What a dashboard shows of one node; a few hundred bytes each in every status document.
DEFAULT_SIZE = 200
REFUSALS_SIZE = 50  # the refusals' own ring
# An event identical to one of the last few (kind, group and text) only bumps that one's count.
FOLD_WINDOW = 8
# Text from the network (a refused HELLO's cluster name) is cut to this length.
MAX_TEXT = 300

ELECTION = "election"  # became leader / candidate / follower, a new term or leader
TRANSFER = "transfer"  # leadership transfers and primary promotions
RECOVERY = "recovery"  # store recovery at start, a cut torn or corrupt tail, recovering from damage
RESET = "reset"  # the log truncated or reset to the leader's
REFUSAL = "refusal"  # HELLO refusals (either way), permission denials, limit hits
NODE = "node"  # the node started or stops
MEMBERS = "members"  # a membership change asked for, committed or refused; the configuration followed
KINDS = (ELECTION, TRANSFER, RECOVERY, RESET, REFUSAL, NODE, MEMBERS)


@dataclass(slots=True)
class Event:
    t: float  # wall-clock seconds of the last occurrence
    kind: str
    group: str | None
    text: str
    count: int = 1
    seq: int = 0  # when it last occurred among all the node's events (both rings share the order)

    def doc(self) -> dict[str, Any]:
        return {"t": round(self.t, 3), "kind": self.kind, "group": self.group, "text": self.text,
                "count": self.count}


class Events:
    """The ring of a node's last `size` events."""

    def __init__(self, size: int = DEFAULT_SIZE, clock: Callable[[], float] = time.time,
                 refusals_size: int = REFUSALS_SIZE) -> None:
        self._ring: deque[Event] = deque(maxlen=size)
        self._refusals: deque[Event] = deque(maxlen=refusals_size)
        self._clock = clock
        self.recorded = 0  # events recorded since start, folded ones included

    def record(self, kind: str, text: str, group: str | None = None) -> None:
        self.recorded += 1
        now = self._clock()
        text = shown(text, MAX_TEXT)
        ring = self._refusals if kind == REFUSAL else self._ring
        for i in range(1, min(FOLD_WINDOW, len(ring)) + 1):
            e = ring[-i]
            if e.kind == kind and e.group == group and e.text == text:
                del ring[-i]
                e.t = now
                e.count += 1
                e.seq = self.recorded
                ring.append(e)
                return
        ring.append(Event(now, kind, group, text, seq=self.recorded))

    def recent(self) -> list[dict[str, Any]]:
        """Every event held, refusals included, oldest first, as plain dicts (for JSON and msgpack)."""
        return [e.doc() for e in sorted((*self._ring, *self._refusals), key=lambda e: e.seq)]

    def __len__(self) -> int:
        return len(self._ring) + len(self._refusals)


class CounterWatch:
    """Turns counters the node keeps anyway into events when they move: polled by the node's
    housekeeping, so the paths that bump them (connection limits, a peer's refusals) stay as they are."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}

    def increase(self, key: str, value: int) -> int:
        """How much counter `key` grew since the last call (0 the first time it is seen at 0)."""
        before = self._last.get(key, 0)
        self._last[key] = value
        return max(0, value - before)
