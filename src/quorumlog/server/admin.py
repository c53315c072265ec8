"""The admin HTTP port (aiohttp): `/status` as JSON, `/metrics` in Prometheus text format, and the cluster
dashboard at `/` (dashboard/)."""

from __future__ import annotations

import json
import logging
import socket
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder

from .dashboard import add_dashboard
from .exporter import node_registry

if TYPE_CHECKING:
    from .node import NodeServer


class _MalformedRequests(logging.Filter):
    """aiohttp answers a malformed request (a line too long, bad HTTP) 400 and logs it at ERROR with a
    traceback: the client's mistake, and a way to flood the log. It becomes one line at WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc.message[:200]}"
            record.args, record.exc_info, record.exc_text = (), None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_MALFORMED = _MalformedRequests()


async def start_admin(node: NodeServer, sock: socket.socket) -> web.AppRunner:
    """Serve the admin endpoints on the listening socket `sock`; returns the runner to clean up."""
    logging.getLogger("aiohttp.server").addFilter(_MALFORMED)  # (once: a logger keeps a filter once)
    app = web.Application()

    async def status(_request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(node.status(), indent=2), content_type="application/json")

    registry = node_registry(node)

    async def metrics(request: web.Request) -> web.Response:
        # The Prometheus text format, or OpenMetrics when the scraper asks for it.
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encode(registry), headers={"Content-Type": content_type})

    add_dashboard(app, node)  # "/": the live cluster dashboard, and its /api/cluster
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner


def render_metrics(node: NodeServer) -> str:
    """Every metric of the node in the Prometheus text format (exporter.py collects them)."""
    return generate_latest(node_registry(node)).decode()
