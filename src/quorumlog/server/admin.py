"""The admin HTTP port (aiohttp): `/status` as JSON, `/metrics` in Prometheus text format, and the cluster
dashboard at `/` (dashboard/)."""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder

from .dashboard import add_dashboard
from .exporter import node_registry

if TYPE_CHECKING:
    from .node import NodeServer


async def start_admin(node: NodeServer, sock: socket.socket) -> web.AppRunner:
    """Serve the admin endpoints on the listening socket `sock`; returns the runner to clean up."""
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
