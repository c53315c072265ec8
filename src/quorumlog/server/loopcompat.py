"""Which event loop the node runs on.

uvloop moves frames several times faster, but net/connection.py asserts that every transport is an
`asyncio.Transport`, and uvloop's transports are not subclasses of it: on uvloop every connection fails
in connection_made. Until the wire layer accepts them, uvloop is used only when its transport class
passes that check; otherwise the stdlib loop runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def uvloop_usable() -> bool:
    try:
        import uvloop.loop
    except ImportError:
        return False
    return issubclass(uvloop.loop.TCPTransport, asyncio.Transport)  # type: ignore[attr-defined]


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    if uvloop_usable():
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop
