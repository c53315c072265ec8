"""The live cluster dashboard on every node's admin port: `/` (a static page, static/), which polls
`/api/cluster` (view.py: every member's status, as this node fetches it) once a second.

The page is plain HTML, JavaScript and CSS shipped inside this package: no build step, nothing
fetched from elsewhere. It inserts text with textContent only: names and events come from the
network (a refused HELLO's cluster name is an event's text).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING

from aiohttp import web

from .view import ClusterView

if TYPE_CHECKING:
    from ..node import NodeServer

STATIC = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
# The page runs no script but its own and loads nothing from elsewhere.
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"}


def add_dashboard(app: web.Application, node: NodeServer) -> None:
    """Serve the dashboard from `app`: `/`, its static files under `/dashboard/`, and `/api/cluster`."""
    view = ClusterView(node)
    files = {name: (resources.files(__name__) / "static" / name).read_bytes() for name in STATIC}

    async def index(_request: web.Request) -> web.Response:
        return web.Response(body=files["index.html"], content_type=STATIC["index.html"], charset="utf-8",
                            headers=HEADERS)

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in files or name == "index.html":
            raise web.HTTPNotFound()
        return web.Response(body=files[name], content_type=STATIC[name], charset="utf-8", headers=HEADERS)

    async def cluster(_request: web.Request) -> web.Response:
        doc = await view.snapshot()
        return web.Response(text=json.dumps(doc, allow_nan=False), content_type="application/json",
                            headers=HEADERS)

    async def cleanup(_app: web.Application) -> None:
        await view.close()

    app.router.add_get("/", index)
    app.router.add_get("/dashboard/{name}", static)
    app.router.add_get("/api/cluster", cluster)
    app.on_cleanup.append(cleanup)
