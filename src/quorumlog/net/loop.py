"""Event loop choice: uvloop when it is installed (it moves frames several times faster), else asyncio."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop.new_event_loop if importable, else asyncio.new_event_loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return cast(Callable[[], asyncio.AbstractEventLoop], uvloop.new_event_loop)


def run(main: Coroutine[Any, Any, T], *, use_uvloop: bool = True) -> T:
    """asyncio.run on uvloop when available."""
    with asyncio.Runner(loop_factory=loop_factory() if use_uvloop else None) as runner:
        return runner.run(main)
