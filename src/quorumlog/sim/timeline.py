"""A simulated run's timeline, shared by the Raft and primary/backup simulators: the windows of faults,
healing and quiet, and the trace of what happened, printed when a seed fails."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def window_phase(step: int, window_steps: int, steps: int) -> str:
    """"faults", "heal" (faults over, clients still write) or "quiet" (clients stopped too) for `step` of a
    run cut into windows of `window_steps`; the last window may be shorter."""
    w = min(window_steps, steps)
    pos = step % w
    window_end = min(w, steps - (step - pos))
    if pos >= window_end - max(int(window_end * 0.15), 70):
        return "quiet"
    if pos >= window_end - max(int(window_end * 0.4), 150):
        return "heal"
    return "faults"


def full_window(step: int, window_steps: int, steps: int) -> bool:
    """Whether `step` lies in a window of the full length (the last one may be shorter, and so are its heal
    and quiet spans)."""
    w = min(window_steps, steps)
    return steps - (step - step % w) >= w


def format_trace(trace: Iterable[tuple[int, str, Any]], describe: Callable[[Any], str]) -> str:
    """One line per event: its time, who ("net" for a message sent, described by `describe`), what."""
    return "\n".join(f"{t:>8} net  {describe(what)}" if who == "send" else f"{t:>8} {who:<4} {what}"
                     for t, who, what in trace)
