"""SIGTERM ends a command as Ctrl-C does: its `finally` blocks run, so the nodes (and Spark) it started
are stopped and their data removed. Without it, SIGTERM's default action left them running."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


def exit_on_sigterm(_sig: int, _frame: object) -> None:
    """The SIGTERM handler: leave as Ctrl-C would, through every `finally` on the way out."""
    raise SystemExit(128 + signal.SIGTERM)


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    old = signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
