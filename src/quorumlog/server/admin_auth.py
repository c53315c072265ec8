"""Who may use the admin port: requests must name the node in their Host header (a page whose name was
rebound to the node's address names another), and, when the node has an admin token, carry it as
`Authorization: Bearer <token>`. docs/security.md describes both."""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import hdrs, web

from ..config import NodeConfig
from .peers import split_address

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Routes served without the token: the dashboard's page and its static files hold no data (the page asks
# for the token and sends it with its requests), and /healthz only says the node serves.
OPEN_ROUTES = frozenset({"/", "/dashboard/{name}", "/healthz"})
LOCAL_NAMES = frozenset({"localhost"})
ERROR_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def host_name(header: str) -> str:
    """The name in a Host header, without its port and brackets, lowercased ("" when malformed)."""
    h = header.strip().lower()
    if h.startswith("["):
        name, sep, rest = h[1:].partition("]")
        return name if sep and (not rest or rest[1:].isdigit() and rest[0] == ":") else ""
    name, sep, port = h.rpartition(":")
    if sep:
        if not port.isdigit():
            return ""
        h = name
    return h.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class AdminGuard:
    """The Host check and the bearer token, as an aiohttp middleware (`middleware`)."""

    def __init__(self, admin_listen: str, token: str | None, hosts: Iterable[str] = (),
                 metrics_open: bool = False) -> None:
        own = split_address(admin_listen)[0]
        # An address cannot be rebound to another machine, so any address is accepted as Host; names
        # must be the admin address's own, localhost, or listed in admin_hosts (".example.com": any name
        # under example.com).
        listed = [h.strip().lower().rstrip(".") for h in hosts]
        self.names = LOCAL_NAMES | {host_name(own)} | {host_name(h) for h in listed if not h.startswith(".")}
        self.suffixes = tuple(h for h in listed if h.startswith(".") and len(h) > 1)
        self._token = token.encode() if token is not None else None
        self.open_routes = OPEN_ROUTES | ({"/metrics"} if metrics_open else set())

    def host_allowed(self, header: str | None) -> bool:
        if not header:
            return False
        name = host_name(header)
        return bool(name) and (name in self.names or name.endswith(self.suffixes) or _is_address(name))

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header carries the token (compared in constant time)."""
        if self._token is None:
            return True
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.host_allowed(request.headers.get(hdrs.HOST)):
            return _error(421, "this Host is not the node's admin address: list the name in admin_hosts")
        route = request.match_info.route.resource
        canonical = route.canonical if route is not None else None
        if canonical not in self.open_routes and not self.authorized(request.headers.get(hdrs.AUTHORIZATION)):
            return _error(401, "admin token required: send Authorization: Bearer <token>",
                          {hdrs.WWW_AUTHENTICATE: 'Bearer realm="quorumlog admin"'})
        return await handler(request)


def admin_guard(cfg: NodeConfig) -> AdminGuard:
    assert cfg.admin_listen is not None
    return AdminGuard(cfg.admin_listen, cfg.admin_token, cfg.admin_hosts, cfg.admin_metrics_open)


def _error(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=json.dumps({"error": text}), content_type="application/json",
                        headers={**ERROR_HEADERS, **(headers or {})})
