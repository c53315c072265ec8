"""A leader's view of one follower's log: how far it matches ours, and which phase replication is in.

As in etcd's tracker/progress.go, the phase changes only through the methods below, and each refuses a
change the leader's protocol never makes (ProgressError: a bug in the leader, never the follower's doing).

- COMPARE (etcd's probe): one control message at a time looks for the last index where the follower's
  log matches ours, from `compare_index` down; `mismatch_at` is the lowest index found divergent so far.
- TRUNCATE: the follower's entries after `truncate_index` are not ours; one control message cuts them.
- APPEND (etcd's replicate): pushes from `next_index` on, `inflight` holding those not yet acknowledged.
- RESET (etcd's snapshot): the follower needs entries we expired, so its log restarts where ours begins.

`match` is the watermark: the highest index the follower durably holds, matching ours. Nothing here holds
it below `next_index`: an acknowledgement that arrives after the follower lost entries (a delayed duplicate)
may raise it past what is being pushed, until the follower's next answer shows its end (_check_shorter).
"""

from __future__ import annotations

from enum import Enum


class State(Enum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    APPEND = "APPEND"
    RESET = "RESET"


class ProgressError(AssertionError):
    """A transition the leader's protocol never makes: a bug, not a condition to handle."""


class Progress:
    """Replication progress of one follower, for one leader term; starts comparing at `compare_index`."""

    __slots__ = ("state", "match", "next_index", "compare_index", "truncate_index", "mismatch_at", "inflight",
                 "control_sent_ms")

    def __init__(self, compare_index: int) -> None:
        self.state = State.COMPARE
        self.match = -1
        self.next_index = 0
        self.compare_index = compare_index
        self.truncate_index = -1
        # Lowest index found divergent in this compare round: the follower's entries from there on
        # differ from ours, and so do those between it and the next index the round compares.
        self.mismatch_at: int | None = None
        # first index -> (last index, sent at); insertion order is send order, so the first is the oldest.
        # Empty unless APPEND: every way out of APPEND clears it, and only APPEND adds to it.
        self.inflight: dict[int, tuple[int, int]] = {}
        # When the unanswered control message (COMPARE, TRUNCATE, RESET) left; None: send one now.
        self.control_sent_ms: int | None = None

    def __repr__(self) -> str:
        return (f"Progress({self.state.value}, match={self.match}, next={self.next_index}, "
                f"compare={self.compare_index}, truncate={self.truncate_index}, inflight={len(self.inflight)})")

    def _refused(self, what: str) -> ProgressError:
        return ProgressError(f"{what} refused in {self.state.value}: {self!r}")

    # -- predicates ----------------------------------------------------------------------------
    @property
    def is_comparing(self) -> bool:
        return self.state is State.COMPARE

    @property
    def is_truncating(self) -> bool:
        return self.state is State.TRUNCATE

    @property
    def is_appending(self) -> bool:
        return self.state is State.APPEND

    @property
    def is_resetting(self) -> bool:
        return self.state is State.RESET

    # -- transitions ---------------------------------------------------------------------------
    def become_compare(self, index: int) -> None:
        """Start a compare round at `index`. Allowed from every state: any answer may show that the
        follower's log is not what we thought (lost entries, a refused push, a failed truncation)."""
        self.state = State.COMPARE
        self.compare_index = index
        self.mismatch_at = None
        self.inflight.clear()
        self.control_sent_ms = None

    def become_truncate(self) -> None:
        """The compare round found the follower's entries after the compare index are not ours: cut there."""
        if self.state is not State.COMPARE:
            raise self._refused("truncate")
        self.state = State.TRUNCATE
        self.truncate_index = self.compare_index
        self.control_sent_ms = None

    def become_append(self, next_index: int) -> None:
        """The follower's log matches ours up to next_index - 1 and ends there: push from next_index."""
        if self.state is State.APPEND:
            raise self._refused("append")
        if next_index < 0:
            raise self._refused(f"append from {next_index}")
        self.state = State.APPEND
        self.next_index = next_index
        self.inflight.clear()

    def become_reset(self, now: int) -> None:
        """A reset left at `now`: the follower's log is to restart at our beginning. Never from APPEND,
        which first falls back to COMPARE below our floor (the compare then finds no term to name)."""
        if self.state is State.APPEND:
            raise self._refused("reset")
        self.state = State.RESET
        self.inflight.clear()
        self.control_sent_ms = now

    # -- the watermark -------------------------------------------------------------------------
    def on_match(self, index: int) -> bool:
        """The follower durably holds our entries up to `index`: raise the watermark; True if it rose."""
        if index <= self.match:
            return False
        self.match = index
        return True

    def lower_match(self, end_index: int) -> None:
        """The follower's log ends below the watermark: it lost entries it acknowledged."""
        if end_index >= self.match:
            raise self._refused(f"lowering the watermark to {end_index}")
        self.match = end_index

    def on_reset_acked(self, acked: int) -> None:
        """The follower restarted its log at ours: it matches up to `acked` (our begin - 1), no more."""
        if self.state is not State.RESET:
            raise self._refused("a reset's answer")
        self.match = acked

    # -- COMPARE -------------------------------------------------------------------------------
    def compare_at(self, index: int) -> None:
        """Go on with this compare round at `index`: the follower's end, where its log begins, or lower
        after a mismatch (below our floor, the next dispatch resets the follower)."""
        if self.state is not State.COMPARE:
            raise self._refused(f"compare at {index}")
        self.compare_index = index

    def on_mismatch(self) -> None:
        """The follower's entry at the compare index differs from ours, and so does all it holds after."""
        if self.state is not State.COMPARE:
            raise self._refused("a mismatch")
        ci = self.compare_index
        self.mismatch_at = ci if self.mismatch_at is None else min(self.mismatch_at, ci)

    # -- control messages (COMPARE, TRUNCATE, RESET) -------------------------------------------
    def control_due(self, now: int, timeout_ms: int) -> bool:
        """Whether a control message may leave: none is unanswered, or the last one timed out."""
        sent = self.control_sent_ms
        return sent is None or now - sent >= timeout_ms

    def wait_control(self, now: int) -> None:
        """No control message before a push timeout after `now` (one left, or the answer asks to wait)."""
        self.control_sent_ms = now

    def control_answered(self) -> None:
        self.control_sent_ms = None

    # -- APPEND --------------------------------------------------------------------------------
    def sent_push(self, last: int, now: int) -> None:
        """A push of next_index..last left at `now`."""
        if self.state is not State.APPEND or last < self.next_index:
            raise self._refused(f"a push of {self.next_index}..{last}")
        self.inflight[self.next_index] = (last, now)
        self.next_index = last + 1

    def push_timed_out(self, now: int, timeout_ms: int) -> bool:
        """Whether the oldest push in flight has waited a push timeout for its acknowledgement."""
        inflight = self.inflight
        return bool(inflight) and now - inflight[next(iter(inflight))][1] >= timeout_ms

    def rewind(self) -> None:
        """A push or its ack was lost: start again from what the follower is known to hold."""
        if self.state is not State.APPEND:
            raise self._refused("rewind")
        self.inflight.clear()
        self.next_index = self.match + 1

    def on_append_acked(self, first: int, acked: int) -> bool:
        """The push from `first` was stored, the follower holding ours up to `acked`: True if the
        watermark rose. Any state: an ack may arrive after the round it belonged to ended."""
        inflight = self.inflight
        sent = inflight.get(first)
        if sent is not None and sent[0] <= acked:  # (not an older, shorter push from there)
            del inflight[first]
        if not self.on_match(acked):
            return False
        # Pushes wholly below the watermark are done even if their own ack was lost.
        while inflight:
            oldest = next(iter(inflight))
            if inflight[oldest][0] > acked:
                break
            del inflight[oldest]
        return True
