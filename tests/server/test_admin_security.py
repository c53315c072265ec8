"""The admin port's protections, against real `quorumlog serve` processes: it binds loopback unless told
otherwise, refuses to start beyond loopback without a token (or --insecure-admin), asks for the token on
every endpoint with data, checks the Host header (DNS rebinding), and holds at most
max_admin_connections connections. Plus the dashboard page asking for the token in Chromium."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quorumlog.cli import build_parser
from quorumlog.config import load_node_config
from quorumlog.errors import ConfigError
from quorumlog.server.admin_auth import host_name
from quorumlog.server.cluster import LocalCluster, free_ports
from quorumlog.server.main import config_from_flags

from . import test_dashboard
from .conftest import wait_until

QL = [sys.executable, "-m", "quorumlog"]
TOKEN = "admin-t0ken-" + "x" * 20
NOT_HERE = "192.0.2.1"  # TEST-NET-1 (RFC 5737): no machine has it, so binding it fails and exposes nothing
browser = test_dashboard.browser  # the dashboard tests' Chromium


def http(url: str, token: str | None = None, host: str | None = None,
         auth: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET `url`: (status, headers, body), whatever the status."""
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if auth is not None:
        headers["Authorization"] = auth
    if host is not None:
        headers["Host"] = host
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def serving(url: str, token: str | None = None) -> bool:
    try:
        return http(url + "/healthz", token)[0] == 200
    except OSError:  # not listening yet, or the connection was closed at accept
        return False


def one_node(cluster_factory: Any, **node: Any) -> tuple[LocalCluster, str]:
    cluster: LocalCluster = cluster_factory(nodes=1, node=node)
    base = cluster.nodes[0].admin_url
    wait_until(lambda: serving(base), 30, "the admin port", interval=0.1)
    return cluster, base


@contextlib.contextmanager
def serve(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`quorumlog serve ARGS` as a process of its own, stopped (by its pid) when the block ends."""
    proc = subprocess.Popen([*QL, "serve", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def refused_start(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`quorumlog serve ARGS`, expected to stop at start (bounded: killed after 60 s if it serves)."""
    return subprocess.run([*QL, "serve", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


# -- where it binds, and the refusal ---------------------------------------------------------------

def test_admin_port_binds_loopback_by_default(tmp_path: Path) -> None:
    """--admin-port serves on 127.0.0.1, not on the host of the node's listen address (here another loopback
    address, 127.0.0.2, so that nothing leaves the machine)."""
    port, admin = free_ports(2)
    with serve("--id", "n0", "--peers", f"n0=127.0.0.2:{port}", "--data-dir", str(tmp_path / "d"),
               "--admin-port", str(admin)) as proc:
        url = f"http://127.0.0.1:{admin}"
        wait_until(lambda: proc.poll() is not None or serving(url), 30, "the admin port on 127.0.0.1", interval=0.1)
        assert proc.poll() is None
        status, _, body = http(url + "/status")
        doc = json.loads(body)
        assert status == 200 and doc["admin"] == f"127.0.0.1:{admin}" and doc["listen"] == f"127.0.0.2:{port}"
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.2", admin), timeout=5).close()


def test_a_non_loopback_admin_port_without_a_token_is_refused_before_binding(tmp_path: Path) -> None:
    port, admin = free_ports(2)
    # The TOML's admin_listen, on an address no machine has: the refusal, not a failed bind.
    toml = tmp_path / "node.toml"
    toml.write_text(f'id = "n0"\ndata_dir = "{tmp_path / "d"}"\nadmin_listen = "{NOT_HERE}:{admin}"\n'
                    f'[[group]]\nname = "g0"\npeers = "n0=127.0.0.1:{port}"\n')
    r = refused_start("--config", str(toml))
    assert r.returncode == 2 and f"refusing to serve the admin port on {NOT_HERE}:{admin}" in r.stderr, r.stderr
    # The flag, on every interface: refused before the socket is bound.
    r = refused_start("--id", "n0", "--peers", f"n0=127.0.0.1:{port}", "--data-dir", str(tmp_path / "d"),
                      "--admin-listen", f"0.0.0.0:{admin}")
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"quorumlog: error: refusing to serve the admin port on 0.0.0.0:{admin} without a token")
    for what in ("admin_token_file", "--admin-token-file", "$QUORUMLOG_ADMIN_TOKEN", "--insecure-admin"):
        assert what in last
    # With a token, or --insecure-admin, the node goes on to bind it (and fails here only for want of the
    # address); --insecure-admin also warns.
    r = refused_start("--config", str(toml), env={"QUORUMLOG_ADMIN_TOKEN": TOKEN})
    assert "refusing" not in r.stderr and f"cannot listen on admin address {NOT_HERE}:{admin}" in r.stderr, r.stderr
    r = refused_start("--config", str(toml), "--insecure-admin")
    assert "refusing" not in r.stderr and f"cannot listen on admin address {NOT_HERE}:{admin}" in r.stderr, r.stderr
    assert "WITHOUT a token (--insecure-admin)" in r.stderr


# -- the token -------------------------------------------------------------------------------------

def test_with_a_token_only_the_page_and_healthz_answer_without_it(cluster_factory: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "admin-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    _cluster, base = one_node(cluster_factory, admin_token_file=str(token_file))
    for path in ("/status", "/api/cluster", "/metrics", "/no-such-page"):
        for token, auth in ((None, None), ("wrong", None), (TOKEN[:-1], None), (None, f"Basic {TOKEN}"),
                            (None, TOKEN)):
            status, headers, body = http(base + path, token, auth=auth)
            assert status == 401, (path, token, auth, status)
            assert json.loads(body) == {"error": "admin token required: send Authorization: Bearer <token>"}
            assert headers["WWW-Authenticate"].startswith("Bearer ")
    status, _, body = http(base + "/status", TOKEN)
    assert status == 200 and json.loads(body)["node"] == "n0"
    status, _, body = http(base + "/api/cluster", auth=f"bearer {TOKEN}")  # the scheme in any case
    assert status == 200 and json.loads(body)["served_by"] == "n0"
    status, _, body = http(base + "/metrics", TOKEN)
    assert status == 200 and b"quorumlog_is_leader" in body
    assert http(base + "/no-such-page", TOKEN)[0] == 404
    # The page and its files hold no data: they load without the token (the page then asks for it).
    for path in ("/", "/dashboard/app.js", "/dashboard/style.css"):
        status, _, body = http(base + path)
        assert status == 200 and b'"n0"' not in body and TOKEN.encode() not in body
    status, _, body = http(base + "/healthz")
    assert status == 200 and body == b"ok\n"


def test_metrics_open_only_when_configured(cluster_factory: Any) -> None:
    _c, base = one_node(cluster_factory, admin_token=TOKEN, admin_metrics_open=True)
    status, _, body = http(base + "/metrics")
    assert status == 200 and b"quorumlog_is_leader" in body
    assert http(base + "/status")[0] == 401 and http(base + "/api/cluster")[0] == 401
    assert http(base + "/status", TOKEN)[0] == 200


# -- the Host header -------------------------------------------------------------------------------

def test_a_host_header_naming_another_site_is_refused(cluster_factory: Any) -> None:
    """A page whose name was rebound to the node's address sends its own name as Host: refused, token or
    not (here none: on loopback the port is open)."""
    cluster, base = one_node(cluster_factory, admin_hosts=["dash.example.internal", ".pods.example"])
    port = cluster.nodes[0].admin_port
    for host in ("evil.example", f"evil.example:{port}", f"localhost.evil.example:{port}", "dash.example.internal.x",
                 f"127.0.0.1.nip.io:{port}", f"{port}", "localhost:x", "pods.example", "evilpods.example", ""):
        status, _, body = http(base + "/status", host=host)
        assert status == 421 and b'"n0"' not in body, host
        assert http(base + "/", host=host)[0] == 421
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}", "dash.example.internal",
                 f"Dash.Example.Internal.:{port}", f"n0.pods.example:{port}", f"127.0.0.1:{port + 1}"):
        status, _, body = http(base + "/status", host=host)
        assert status == 200 and json.loads(body)["node"] == "n0", host
    # HTTP/1.0 without a Host header at all.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /status HTTP/1.0\r\n\r\n")
        assert s.recv(100).split(b"\r\n")[0].endswith(b" 421 Misdirected Request")


def test_host_names_are_compared_without_port_case_or_final_dot() -> None:
    assert [host_name(h) for h in ("Example.COM:80", "[::1]:9100", "[::1]", "node.", "a:b", "[::1]x", "")] == \
        ["example.com", "::1", "::1", "node", "", "", ""]


# -- the connection cap ----------------------------------------------------------------------------

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def held_connection(port: int, deadline: float) -> socket.socket:
    """A kept-alive connection the node answered on (retried while a just-closed probe still counts)."""
    while True:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(REQUEST)
        answer = s.recv(4096)
        if answer.startswith(b"HTTP/1.1 200"):
            return s
        s.close()
        assert time.monotonic() < deadline, f"no connection held: {answer!r}"
        time.sleep(0.05)


def test_the_admin_port_holds_at_most_max_admin_connections(cluster_factory: Any) -> None:
    cap = 4
    cluster, base = one_node(cluster_factory, max_admin_connections=cap)
    port = cluster.nodes[0].admin_port
    deadline = time.monotonic() + 20
    held = [held_connection(port, deadline) for _ in range(cap)]
    extras: list[socket.socket] = []
    try:
        for _ in range(3):  # past the cap: closed at once, before anything is read
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            extras.append(s)
            t0 = time.monotonic()
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(100) == b""
            assert time.monotonic() - t0 < 2
        for s in held:  # the held ones are still served
            s.sendall(REQUEST)
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        for s in held + extras:
            s.close()
    # Once they are gone, a new connection is served again.
    wait_until(lambda: serving(base), 10, "a connection served after the others closed", interval=0.1)
    events = json.loads(http(base + "/status")[2])["events"]
    assert any(e["text"] == "admin connections refused: max_admin_connections reached" and e["count"] >= 3
               for e in events)


# -- the dashboard asks for the token --------------------------------------------------------------

LOGIN_STATE = """
const form = document.getElementById('login');
return {state: document.body.dataset.state, asking: form ? !form.hidden : false,
        error: form ? document.getElementById('login-error').textContent : null,
        nodes: [...document.querySelectorAll('article.node')].map((n) => n.dataset.node),
        stored: sessionStorage.getItem('quorumlog.admin-token')};
"""


def login_state(driver: Any) -> dict[str, Any]:
    return dict(driver.execute_script(LOGIN_STATE))


def test_the_dashboard_asks_for_the_token_once(cluster_factory: Any, browser: Any) -> None:
    cluster, base = one_node(cluster_factory, admin_token=TOKEN)
    browser.get(base + "/")
    s = wait_until(lambda: (st := login_state(browser))["asking"] and st, 15, "the page asking for the token")
    assert s["state"] == "login" and s["nodes"] == [] and s["error"] == "" and s["stored"] is None

    def submit(token: str) -> None:
        field = browser.find_element("css selector", "#token")
        field.clear()
        field.send_keys(token)
        browser.find_element("css selector", "#login button").click()

    submit("not-the-token")
    s = wait_until(lambda: (st := login_state(browser))["error"] and st, 15, "the wrong token refused")
    assert s["asking"] and s["error"] == "that token was refused" and s["stored"] is None
    submit(TOKEN)
    s = wait_until(lambda: (st := login_state(browser))["nodes"] and st, 15, "the cluster shown")
    assert s == {"state": "live", "asking": False, "error": "that token was refused", "nodes": ["n0"],
                 "stored": TOKEN}
    # Kept for the tab: a reload shows the cluster without asking again.
    browser.refresh()
    s = wait_until(lambda: (st := login_state(browser))["nodes"] and st, 15, "the cluster shown after a reload")
    assert not s["asking"] and s["stored"] == TOKEN


# -- the settings and flags, without processes -----------------------------------------------------

def flags(*argv: str) -> Any:
    args = build_parser().parse_args(["serve", *argv])
    from quorumlog.commands.serve import read_admin_token

    return config_from_flags(config=args.config, node_id=args.node_id, groups=args.group, peers=args.peers,
                             data_dir=args.data_dir, admin_port=args.admin_port, cluster=args.cluster, secret=None,
                             listen=args.listen, flush=args.flush, insecure=args.insecure,
                             admin_listen=args.admin_listen, admin_token=read_admin_token(args),
                             insecure_admin=args.insecure_admin)


def test_admin_flags_and_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUORUMLOG_ADMIN_TOKEN", raising=False)
    monkeypatch.delenv("QUORUMLOG_ADMIN_TOKEN_FILE", raising=False)
    base = ["--id", "n0", "--peers", "n0=10.0.0.5:9000", "--data-dir", str(tmp_path)]
    cfg = flags(*base, "--admin-port", "9100")
    assert cfg.admin_listen == "127.0.0.1:9100" and cfg.admin_token is None and not cfg.insecure_admin
    cfg = flags(*base, "--admin-listen", "10.0.0.5:9100", "--insecure-admin")
    assert cfg.admin_listen == "10.0.0.5:9100" and cfg.insecure_admin
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", *base, "--admin-port", "1", "--admin-listen", "127.0.0.1:2"])
    monkeypatch.setenv("QUORUMLOG_ADMIN_TOKEN", TOKEN)
    cfg = flags(*base, "--admin-port", "9100")
    assert cfg.admin_token == TOKEN and TOKEN not in repr(cfg)
    token_file = tmp_path / "t"
    token_file.write_text("from-the-file\n")
    assert flags(*base, "--admin-token-file", str(token_file)).admin_token == "from-the-file"

    toml = tmp_path / "node.toml"
    toml.write_text(f'id = "n0"\nlisten = "10.0.0.5:9000"\nadmin_listen = "10.0.0.5:9100"\n'
                    f'admin_token_file = "{token_file}"\nadmin_hosts = ["dash.example"]\nadmin_metrics_open = true\n'
                    'max_admin_connections = 8\n[[group]]\nname = "g0"\npeers = "n0=10.0.0.5:9000"\n')
    cfg = load_node_config(toml)
    assert (cfg.admin_token, cfg.admin_hosts, cfg.admin_metrics_open, cfg.max_admin_connections) == \
        ("from-the-file", ("dash.example",), True, 8)
    assert "from-the-file" not in repr(cfg)
    # --admin-port keeps the file's admin host; --admin-listen replaces the address.
    monkeypatch.delenv("QUORUMLOG_ADMIN_TOKEN")
    assert flags("--config", str(toml), "--admin-port", "9200").admin_listen == "10.0.0.5:9200"
    assert flags("--config", str(toml), "--admin-listen", "127.0.0.1:9300").admin_listen == "127.0.0.1:9300"
    for bad in ("max_admin_connections = 0", 'admin_token = ""', "admin_hosts = [1]"):
        toml.write_text(f'id = "n0"\n{bad}\n[[group]]\nname = "g0"\npeers = "n0=127.0.0.1:9000"\n')
        with pytest.raises(ConfigError):
            load_node_config(toml)
