"""The command line against real nodes: append, read, tail, status, transfer-leader, bench; the admin
HTTP endpoints; local-cluster's start and clean stop; errors as one line and a non-zero status."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from quorumlog.client import Client
from quorumlog.server.cluster import free_ports

from .conftest import kill_leftovers, metric_value, pids_with, scrape, wait_until

QL = [sys.executable, "-m", "quorumlog"]


def ql(*args: str, stdin: str | None = None, timeout: float = 60,
       env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QL, *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env)


def private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_append_read_tail_status_transfer(cluster_factory: Any) -> None:
    cluster = cluster_factory()
    eps = ["--endpoints", cluster.endpoints]
    r = ql("append", *eps, "one", "two")
    assert r.returncode == 0, r.stderr
    first = int(r.stdout.split()[0])
    r = ql("append", *eps, "-q", stdin="three\nfour\nfive\n")
    assert r.returncode == 0 and "appended 3 entries" in r.stdout, r.stdout + r.stderr
    r = ql("read", *eps, "--from", str(first), "--count", "5")
    assert r.stdout.splitlines() == ["one", "two", "three", "four", "five"], r.stderr
    r = ql("read", *eps, "--from", str(first), "--count", "2", "--format", "json")
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d["body"] for d in docs] == ["one", "two"] and docs[0]["index"] == first
    r = ql("read", *eps, "--from", str(first), "--count", "1", "--format", "hex")
    assert r.stdout.split("\t")[2].strip() == b"one".hex()
    r = ql("tail", *eps, "-n", "2")
    assert r.stdout.splitlines() == ["four", "five"], r.stdout + r.stderr

    # (Ctrl-C as a terminal sends it, even when this run was started in the background, which ignores SIGINT
    # in every process it starts unless told otherwise.)
    follower = subprocess.Popen([*QL, "tail", "-f", *eps, "--from", str(first)], stdout=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert follower.stdout is not None
        assert [follower.stdout.readline().strip() for _ in range(5)] == ["one", "two", "three", "four", "five"]
        assert ql("append", *eps, "six").returncode == 0
        assert follower.stdout.readline().strip() == "six"
    finally:
        follower.send_signal(signal.SIGINT)
        follower.wait(10)

    r = ql("status", *eps, "--json")
    assert r.returncode == 0
    docs = json.loads(r.stdout)
    roles = sorted(d["groups"]["g0"]["role"] for d in docs.values())
    assert roles == ["follower", "follower", "leader"]
    leader = next(d["node"] for d in docs.values() if d["groups"]["g0"]["role"] == "leader")
    r = ql("status", *eps)
    assert r.returncode == 0 and "leader" in r.stdout
    # Piped, the table is not cut to 80 columns: every endpoint and heading whole.
    assert all(ep in r.stdout for ep in cluster.endpoints.split(",")), r.stdout
    assert "committed" in r.stdout and "producers" in r.stdout and "…" not in r.stdout, r.stdout
    target = next(n.node_id for n in cluster.nodes if n.node_id != leader)
    r = ql("transfer-leader", *eps, "--to", target)
    assert r.returncode == 0, r.stderr
    with Client(cluster.endpoints) as c:
        wait_until(lambda: c.metadata(with_nodes=False).leader == target, 10, "the new leader")


def test_errors_are_one_line_and_non_zero(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1)
    r = ql("append", "--endpoints", cluster.endpoints, "--group", "nope", "--timeout", "2", "x")
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.count("UNKNOWN_GROUP") == 1, r.stderr
    (port,) = free_ports(1)
    r = ql("read", "--endpoints", f"127.0.0.1:{port}", "--count", "1", "--timeout", "1")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "error" in r.stderr
    for args in (["read", "--from", "-5"], ["read", "--count", "-3"], ["tail", "-n", "-2"], ["read", "--from", "x"]):
        r = ql(*args, "--endpoints", cluster.endpoints)  # refused before connecting (they printed nothing)
        assert r.returncode == 2 and ("must be 0 or more" in r.stderr or "not an integer" in r.stderr), r.stderr
    for cmd in ("serve", "local-cluster", "append", "read", "tail", "status", "transfer-leader", "bench"):
        h = ql(cmd, "--help")
        assert h.returncode == 0 and "usage:" in h.stdout, cmd


def test_errors_name_what_was_wrong(cluster_factory: Any, tmp_path: Path) -> None:
    """Each refusal says what to fix: the member or group that is unknown (and the groups there are), where
    the secret comes from when none was given, a wrong secret as such (not as a member), a node that refused
    us as refused (not down), and a read past the commit index as nothing committed there yet."""
    cluster = cluster_factory(secret="right-5ecret")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUORUMLOG_")}
    eps = ["--endpoints", cluster.endpoints]
    right = ["--secret-file", str(private_file(tmp_path / "right", "right-5ecret\n"))]
    wrong = ["--secret-file", str(private_file(tmp_path / "wrong", "wrong-5ecret\n"))]

    r = ql("append", *eps, "--timeout", "5", "x", env=env)
    assert r.returncode == 2 and "requires a shared secret" in r.stderr, r.stderr
    assert "--secret-file" in r.stderr and "QUORUMLOG_SECRET_FILE" in r.stderr, r.stderr
    r = ql("append", *eps, *wrong, "--timeout", "5", "x", env=env)
    assert r.returncode == 2 and "authentication failed: wrong shared secret" in r.stderr, r.stderr
    assert "UNEXPECTED_MEMBER" not in r.stderr, r.stderr
    r = ql("status", *eps, *wrong, env=env)
    assert r.returncode == 1 and r.stdout.count("refused") >= 3 and "down" not in r.stdout, r.stdout
    assert "authentication failed" in r.stdout, r.stdout

    r = ql("transfer-leader", *eps, *right, "--to", "n7", env=env)
    assert r.returncode == 2 and "UNKNOWN_MEMBER: 'n7' is not a member of group g0" in r.stderr, r.stderr
    r = ql("append", *eps, *right, "--group", "g9", "x", env=env)
    assert r.returncode == 2 and "group 'g9' is not hosted by node n" in r.stderr and "(it hosts g0)" in r.stderr, \
        r.stderr

    assert ql("append", *eps, *right, "one", "two", env=env).returncode == 0
    r = ql("read", *eps, *right, "--from", "100", env=env)
    assert r.returncode == 0 and r.stdout == "", r.stdout
    assert re.fullmatch(r"quorumlog: nothing is committed at index 100 of group g0 yet: its commit index is \d+\n",
                        r.stderr), r.stderr
    r = ql("read", *eps, *right, "--from", "1", env=env)
    assert r.returncode == 0 and r.stdout.split() == ["one", "two"] and r.stderr == "", r.stdout + r.stderr


def test_reads_wait_for_a_starting_cluster_as_appends_do(cluster_factory: Any) -> None:
    """A read run while the nodes are not listening yet retries the connects within --timeout, as an append
    does, rather than failing at once with "Connection refused"."""
    cluster = cluster_factory(start=False)
    proc = subprocess.Popen([*QL, "read", "--endpoints", cluster.endpoints, "--timeout", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        assert proc.poll() is None, proc.communicate()
        cluster.start()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out == "", err
        # A new group: its first entry (the leader's NOOP) is not committed yet, or it is already when the read
        # lands (a loaded machine slows the read's connect retries more than the election): nothing either way.
        assert err == "" or err.startswith("quorumlog: nothing is committed at index 0 of group g0 yet"), err
    finally:
        kill_leftovers(proc, "no other process")


def test_a_terminal_hears_what_a_retrying_command_waits_for() -> None:
    """A wrong endpoint meant --timeout seconds of silence, then the error. On a terminal the command says
    after a moment what it waits for, once."""
    (port,) = free_ports(1)
    master, slave = pty.openpty()
    proc = subprocess.Popen([*QL, "read", "--endpoints", f"127.0.0.1:{port}", "--timeout", "4"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    said = b""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the command exited: the terminal has no writer left
                break
            if not chunk:
                break
            said += chunk
        assert proc.wait(10) == 2
    finally:
        os.close(master)
        kill_leftovers(proc, "no other process")
    lines = said.decode().splitlines()
    assert len(lines) == 2, lines
    hint = rf"quorumlog: no node answers at 127\.0\.0\.1:{port}; retrying for [0-9] s more"
    assert re.fullmatch(hint, lines[0]), lines
    assert lines[1].startswith("quorumlog: error: no node of 127.0.0.1:"), lines


def test_a_client_pointed_at_an_http_port_says_so_at_once(cluster_factory: Any) -> None:
    """The admin port given as an endpoint: the client recognises an HTTP answer and says so at once (it was
    silent for the whole --timeout, and its log showed "HTTP" read as a frame length at every retry). A
    browser or curl at the client port costs the node one log line per connection at most."""
    cluster = cluster_factory(nodes=1)
    node = cluster.nodes[0]
    admin = f"127.0.0.1:{node.admin_port}"
    for args in (["append", "x"], ["read"], ["status"]):
        t0 = time.monotonic()
        r = ql(*args, "--endpoints", admin, "--timeout", "15")
        assert time.monotonic() - t0 < 8, args
        said = r.stdout if args == ["status"] else r.stderr
        assert r.returncode in (1, 2) and f"{admin} answers in HTTP" in said and "admin port" in said, said
        assert "exceeds max_frame_bytes" not in r.stderr and "closing connection" not in r.stderr, r.stderr
        if args != ["status"]:
            assert len(r.stderr.splitlines()) == 1, r.stderr
    assert "not a node" in r.stdout, r.stdout
    before = node.log_path.read_text().count("\n")
    for _ in range(5):
        with contextlib.suppress(OSError, http.client.HTTPException):
            urllib.request.urlopen(f"http://{node.address}/status", timeout=5).read()
    time.sleep(0.5)
    new = node.log_path.read_text().splitlines()[before:]
    assert 1 <= len([line for line in new if "no HELLO" in line]) <= 5 and len(new) <= 6, new


def test_admin_status_and_metrics(cluster_factory: Any) -> None:
    cluster = cluster_factory()
    with Client(cluster.endpoints) as c:
        c.append_many([b"x"] * 10)
        leader = c.metadata(with_nodes=False).leader
    node = next(n for n in cluster.nodes if n.node_id == leader)
    doc = json.loads(urllib.request.urlopen(node.admin_url + "/status", timeout=5).read())
    g = doc["groups"]["g0"]
    assert g["role"] == "leader" and g["committed_index"] >= 10 and set(g["peer_lag"]) == {
        n.node_id for n in cluster.nodes if n.node_id != leader}
    fams = scrape(node.admin_url)
    for name in ("quorumlog_append_latency_seconds_bucket", "quorumlog_commit_latency_seconds_count",
                 "quorumlog_fsync_latency_seconds_sum", "quorumlog_written_entries_total", "quorumlog_read_bytes_total",
                 "quorumlog_term", "quorumlog_group_role", "quorumlog_peer_lag_entries", "quorumlog_pending_appends"):
        assert name in fams, name
    assert metric_value(fams, "quorumlog_is_leader", group="g0", node=leader) == 1
    assert metric_value(fams, "quorumlog_written_entries_total", group="g0", node=leader) >= 10
    # The loop's lag: a 10 ms timer observed every tick, so a node up for a moment has many samples.
    assert metric_value(fams, "quorumlog_loop_lag_seconds_count", node=leader) > 10


def free_range(n: int = 3) -> int:
    """A base port P with P..P+n-1 and P+100..P+100+n-1 free right now (local-cluster's layout)."""
    for _ in range(50):
        base = free_ports(1)[0]
        if base + 100 + n > 65535:
            continue
        try:
            for port in [*range(base, base + n), *range(base + 100, base + 100 + n)]:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    pytest.skip("no free port range for local-cluster")


def read_banner(proc: subprocess.Popen[str]) -> list[str]:
    """local-cluster's lines up to "Ctrl-C stops every node." (or its end; bounded by 30 s)."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.startswith("Ctrl-C stops every node."):
            break
    return lines


def test_local_cluster_starts_and_stops_cleanly(tmp_path: Path) -> None:
    """The banner comes once every node listens (a read run as soon as it shows finds them), in whole lines
    when the output is not a terminal, with the two export lines the command line needs."""
    base = free_range()
    data = tmp_path / "a-data-directory-whose-path-is-long-enough-to-wrap-a-banner-line-at-eighty-columns"
    proc = subprocess.Popen([*QL, "local-cluster", "--nodes", "3", "--groups", "2", "--data-dir", str(data),
                             "--base-port", str(base)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    try:
        lines = read_banner(proc)
        if "port" in "".join(lines) and "not free" in "".join(lines):
            pytest.skip("the port range was taken")
        # Every node listens when the banner shows: a read at once finds them (it once failed, refused).
        for i in range(3):
            socket.create_connection(("127.0.0.1", base + i), timeout=1).close()
        eps = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        secret_file = data / "secret"
        env = {**os.environ, "QUORUMLOG_SECRET_FILE": str(secret_file), "QUORUMLOG_ENDPOINTS": eps}
        r = subprocess.run([*QL, "read", "--group", "g1", "--timeout", "0.5"], capture_output=True, text=True,
                           timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        # Piped, whole lines: each node's line with its log path, the export lines to paste.
        for i in range(3):
            assert any(line.startswith(f"  n{i}  127.0.0.1:{base + i}  ") and line.endswith(f"/n{i}/node.log")
                       for line in lines), lines
        assert f"  export QUORUMLOG_ENDPOINTS={eps}" in lines, lines
        assert f"  export QUORUMLOG_SECRET_FILE={secret_file}" in lines, lines
        assert f"endpoints: {eps}" in lines, lines
        # Authentication is on: a secret only this user reads.
        assert secret_file.stat().st_mode & 0o077 == 0
        secret = secret_file.read_text().strip()
        for group in ("g0", "g1"):
            with Client(eps, group=group, secret=secret, retry_timeout=60) as c:
                assert c.append(group.encode()).index >= 0
        r = subprocess.run([*QL, "append", "--group", "g1", "via-cli"], capture_output=True, text=True, timeout=60,
                           env=env)
        assert r.returncode == 0, r.stderr
        r = ql("append", "--endpoints", eps, "--timeout", "3", "no-secret")
        assert r.returncode != 0 and "secret" in r.stderr, r.stderr
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert "n0 exit 0, n1 exit 0, n2 exit 0" in out.replace("stopped: ", ""), out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for line in lines:  # the nodes it started, by pid, in case it was killed before it stopped them
            if " pid " in line:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(line.split(" pid ", 1)[1].split()[0]), signal.SIGKILL)


@pytest.mark.slow
def test_bench_json_against_local_cluster(tmp_path: Path) -> None:
    r = ql("bench", "--local", "3", "--data-dir", str(tmp_path), "--seconds", "1", "--single", "20",
           "--failovers", "1", "--size", "100", "--batch", "64", "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["throughput"]["appends_per_s"] > 0 and doc["single"]["appends"] == 20
    assert doc["failover"]["rounds"] == 1
    # The floor measured beside it: two loopback round trips and one fdatasync.
    rtt, fsync = doc["loopback_rtt"]["p50_ms"], doc["disk_fsync"]["p50_ms"]
    assert 0 < rtt < 100 and fsync > 0 and doc["floor_ms"] == pytest.approx(2 * rtt + fsync, abs=0.002)
    assert doc["single"]["p50_vs_floor"] == pytest.approx(doc["single"]["p50_ms"] / doc["floor_ms"], rel=0.02)


def test_bench_refuses_what_cannot_run_before_starting_a_node(tmp_path: Path) -> None:
    """A config `serve` would refuse, or failovers nothing could survive, end at once with the reason (they
    once waited 60 s for a leader among nodes that had exited); with no --failovers given, a single node
    skips them; a lone primary runs ASYNC, and a lone Raft node with flush=async commits (it timed out)."""
    r = ql("bench", "--local", "1", "--replication", "primary-backup", "--data-dir", str(tmp_path / "a"), timeout=30)
    assert r.returncode == 2 and "min_in_sync 1 exceeds its 0 backups" in r.stderr, r.stderr
    assert not pids_with(str(tmp_path / "a"))
    r = ql("bench", "--local", "1", "--failovers", "1", "--data-dir", str(tmp_path / "b"), timeout=30)
    assert r.returncode == 2 and "a single node has no one to take over" in r.stderr, r.stderr
    r = ql("bench", "--local", "2", "--replication", "primary-backup", "--failovers", "1", timeout=30)
    assert r.returncode == 2 and "SLAVE_NOT_AVAILABLE" in r.stderr, r.stderr
    for extra in (["--flush", "async"], ["--replication", "primary-backup", "--ack", "async"]):
        r = ql("bench", "--local", "1", *extra, "--seconds", "1", "--single", "20", "--batch", "16", "--json",
               timeout=120)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["single"]["appends"] == 20 and doc["throughput"]["appends_per_s"] > 0 and "failover" not in doc
    # --seconds 0 skips the throughput phase (it once divided by a loop time that had not moved), in the
    # table as in JSON; negative counts are refused.
    r = ql("bench", "--local", "1", "--seconds", "0", "--single", "5", "--size", "100", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["single"]["appends"] == 5 and "throughput" not in doc
    r = ql("bench", "--local", "1", "--seconds", "0", "--single", "5", timeout=120)
    assert r.returncode == 0 and "one-at-a-time p50" in r.stdout and "appends/s" not in r.stdout, r.stderr
    r = ql("bench", "--local", "1", "--seconds", "-1", timeout=30)
    assert r.returncode == 2 and "--seconds: must be 0 or more" in r.stderr, r.stderr


def test_bench_stopped_by_sigterm_stops_its_nodes_and_removes_its_data(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    bench = subprocess.Popen([*QL, "bench", "--local", "3", "--seconds", "120", "--failovers", "0"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        root = wait_until(lambda: list(tmp_path.glob("quorumlog-bench-*")), 30, "the bench's data directory")[0]
        nodes = wait_until(lambda: (p := pids_with(str(root) + "/n")) and len(p) == 3 and p, 30, "three nodes")
        wait_until(lambda: (root / "n0" / "g0").exists(), 30, "the nodes' stores")
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(60) == 128 + signal.SIGTERM
        assert not [p for p in nodes if Path(f"/proc/{p}").exists()], "nodes outlived the bench"
        assert not root.exists()
    finally:
        kill_leftovers(bench, str(tmp_path))


def test_the_secret_comes_from_a_file_or_the_environment_never_argv(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    secret_file = tmp_path / "secret"
    secret_file.write_text("hush-7f3a\n")
    assert ql("serve", "--secret", "hush-7f3a").returncode != 0  # no such flag: it would show in ps
    proc = subprocess.Popen([*QL, "serve", "--id", "n0", "--peers", f"n0=127.0.0.1:{port}", "--data-dir",
                             str(tmp_path / "data"), "--secret-file", str(secret_file), "--log-level", "WARNING"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        eps = ["--endpoints", f"127.0.0.1:{port}", "--timeout", "10"]
        r = ql("append", *eps, "--secret-file", str(secret_file), "one")
        assert r.returncode == 0, r.stderr
        assert b"hush-7f3a" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        env = {**os.environ, "QUORUMLOG_SECRET": "hush-7f3a"}
        r = subprocess.run([*QL, "append", *eps, "two"], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        r = ql("append", "--endpoints", f"127.0.0.1:{port}", "--timeout", "2", "three")  # no secret: refused
        assert r.returncode != 0 and "error" in r.stderr
        r = ql("read", *eps, "--secret-file", str(secret_file), "--from", "0", "--count", "3")
        assert r.stdout.split() == ["one", "two"], r.stdout + r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_node_toml_may_name_a_secret_file(tmp_path: Path) -> None:
    from quorumlog.config import ConfigError, load_node_config

    (tmp_path / "secret").write_text("s3cret\n")
    toml = tmp_path / "node.toml"
    toml.write_text(f'id = "n0"\nsecret_file = "{tmp_path / "secret"}"\n[[group]]\nname = "g0"\n'
                    'peers = "n0=127.0.0.1:9000"\n')
    assert load_node_config(toml).secret == "s3cret"
    (tmp_path / "secret").write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        load_node_config(toml)


def test_serve_refuses_an_outside_address_without_a_secret(tmp_path: Path) -> None:
    """Protected mode: without a secret a node listens on loopback only, unless told --insecure."""
    from quorumlog.config import is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("127.5.0.1") and is_loopback("::1")
    assert is_loopback("localhost") and not is_loopback("0.0.0.0") and not is_loopback("10.0.0.7")
    assert not is_loopback("db.example") and not is_loopback("::")
    (port,) = free_ports(1)
    r = ql("serve", "--id", "n0", "--peers", f"n0=127.0.0.1:{port}", "--listen", f"0.0.0.0:{port}",
           "--data-dir", str(tmp_path / "data"), timeout=30)
    assert r.returncode != 0
    line = r.stderr.strip().splitlines()[-1]
    assert "without authentication" in line and "--insecure" in line and "--secret-file" in line, r.stderr


_MALLINFO = '''
import ctypes, sys
from quorumlog.server.main import keep_freed_memory

class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
kept = sys.argv[1] == "kept"
if kept:
    assert keep_freed_memory()
before = libc.mallinfo2()
buf = bytearray(8 << 20)
during = libc.mallinfo2()
del buf
after = libc.mallinfo2()
print(during.hblkhd - before.hblkhd, during.arena - before.arena, after.arena - during.arena)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                    reason="glibc's allocator only")
def test_a_node_keeps_freed_memory_for_its_next_buffers() -> None:
    """`serve` makes glibc serve a batch-sized buffer from the heap and keep it there once freed (the
    default maps it and unmaps it when freed): the next buffer reuses memory already faulted in."""
    def run(mode: str) -> tuple[int, int, int]:
        out = subprocess.run([sys.executable, "-c", _MALLINFO, mode], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        mapped, grown, trimmed = map(int, out.stdout.split())
        return mapped, grown, trimmed

    mapped, grown, trimmed = run("default")
    assert mapped >= 8 << 20 and grown == trimmed == 0  # mapped for the buffer, unmapped once freed
    mapped, grown, trimmed = run("kept")
    assert mapped == 0 and grown > 0 and trimmed == 0  # from the heap, and still there once freed


@pytest.mark.parametrize("args, says", [
    (["bench", "--local", "0"], "--local: must be 1 or more, not 0"),  # once it used the default endpoints
    (["bench", "--local", "1", "--connections", "0"], "--connections: must be 1 or more"),  # once it measured 0/s
    (["bench", "--local", "1", "--inflight", "0"], "--inflight: must be 1 or more"),
    (["bench", "--local", "1", "--batch", "0"], "--batch: must be 1 or more"),
    (["bench", "--local", "1", "--size", "-1"], "--size: must be 0 or more"),  # once a traceback
    (["local-cluster", "--nodes", "0", "--data-dir", "D"], "--nodes: must be 1 or more"),  # once ran, empty
    (["local-cluster", "--groups", "0", "--data-dir", "D"], "--groups: must be 1 or more"),
    (["local-cluster", "--base-port", "70000", "--data-dir", "D"], "--base-port: must be 1..65336"),  # traceback
    (["local-cluster", "--data-dir", "/proc/quorumlog"], "cannot make the data directory /proc/quorumlog"),
    (["simulate", "--seeds", "a:b"], "expected a seed, a range a:b"),  # once a traceback
    (["simulate", "--seeds", "5:1"], "names no seed"),  # once ran nothing and passed
    (["simulate", "--steps", "-3"], "--steps: must be 1 or more"),
])
def test_bad_numbers_are_refused_in_one_line_before_anything_starts(args: list[str], says: str,
                                                                      tmp_path: Path) -> None:
    args = [str(tmp_path / "d") if a == "D" else a for a in args]
    r = ql(*args, timeout=30)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())


def test_a_port_left_in_time_wait_by_a_stopped_node_counts_as_free() -> None:
    """Restarting local-cluster right after Ctrl-C failed for about a minute with "port … is
    not free: Address already in use": the check bound without SO_REUSEADDR while connections the old nodes
    had closed sat in TIME-WAIT. It now judges a port as a node binds it; a port still listened on is taken."""
    from quorumlog.server.cluster import port_taken

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    assert port_taken(port) is not None  # listened on
    accepted.close()  # the node closes first: its side of the connection waits in TIME-WAIT on `port`
    time.sleep(0.05)
    client.close()
    listener.close()
    assert port_taken(port) is None
