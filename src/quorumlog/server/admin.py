"""The admin HTTP port (aiohttp): `/status` as JSON, `/metrics` in Prometheus text format, the cluster
dashboard at `/` (dashboard/) and `/healthz`. Requests pass the Host check and the admin token
(admin_auth.py); the port holds at most max_admin_connections connections."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder

from .admin_auth import admin_guard
from .dashboard import add_dashboard
from .events import REFUSAL
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
log = logging.getLogger("quorumlog.server")
ACCEPT_RETRY_S = 1.0  # after a failed accept (no descriptor left): the node's other work goes on meanwhile
WARN_EVERY_S = 60.0  # a warning about refused or failed accepts at most this often
# A connection that sends no whole request for this long is closed (aiohttp's default is an hour): it holds
# one of the max_admin_connections places meanwhile. Dashboards poll every second and reuse theirs.
IDLE_CLOSE_S = 15.0


class AdminServer:
    """The admin app's connections, accepted here so that each is counted as it arrives: past
    max_admin_connections a new one is closed at once, before it is read. (A middleware sees requests,
    not connections: idle ones would still hold their descriptors.)"""

    def __init__(self, node: NodeServer, runner: web.AppRunner, sock: socket.socket) -> None:
        self.node = node
        self.runner = runner
        self.sock = sock
        self.refused = 0
        self._warned: dict[str, float] = {}
        self._task = asyncio.create_task(self._accept(), name="admin-accept")

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        server = self.runner.server
        assert server is not None
        cap = self.node.cfg.max_admin_connections
        while True:
            try:
                conn, _addr = await loop.sock_accept(self.sock)
            except OSError as e:
                if self._may_warn("accept"):
                    log.warning("node %s: cannot accept an admin connection: %s", self.node.node_id, e)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            # Accepted one at a time, each registered (connection_made) before the next is counted.
            if len(server.connections) >= cap:
                conn.close()
                self._refuse()
                continue
            try:
                await loop.connect_accepted_socket(server, conn)
            except OSError:
                conn.close()

    def _refuse(self) -> None:
        self.refused += 1
        self.node.events.record(REFUSAL, "admin connections refused: max_admin_connections reached")
        if self._may_warn("cap"):
            log.warning("node %s: the admin port holds max_admin_connections (%d) connections: refusing more "
                        "(%d so far)", self.node.node_id, self.node.cfg.max_admin_connections, self.refused)

    def _may_warn(self, what: str) -> bool:
        now = time.monotonic()
        if now - self._warned.get(what, -WARN_EVERY_S) < WARN_EVERY_S:
            return False
        self._warned[what] = now
        return True

    async def cleanup(self) -> None:
        """Stop accepting, close the listening socket, then every connection and the app."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.sock.close()
        await self.runner.cleanup()


async def start_admin(node: NodeServer, sock: socket.socket) -> AdminServer:
    """Serve the admin endpoints on the listening socket `sock`; returns the server to clean up."""
    logging.getLogger("aiohttp.server").addFilter(_MALFORMED)  # (once: a logger keeps a filter once)
    app = web.Application(middlewares=[admin_guard(node.cfg).middleware])

    async def status(_request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(node.status(), indent=2), content_type="application/json")

    registry = node_registry(node)

    async def metrics(request: web.Request) -> web.Response:
        # The Prometheus text format, or OpenMetrics when the scraper asks for it.
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encode(registry), headers={"Content-Type": content_type})

    async def healthz(_request: web.Request) -> web.Response:
        # Open to probes without the token: says the node serves, and nothing else.
        return web.Response(text="ok\n")

    add_dashboard(app, node)  # "/": the live cluster dashboard, and its /api/cluster
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=IDLE_CLOSE_S)
    await runner.setup()
    return AdminServer(node, runner, sock)


def render_metrics(node: NodeServer) -> str:
    """Every metric of the node in the Prometheus text format (exporter.py collects them)."""
    return generate_latest(node_registry(node)).decode()
