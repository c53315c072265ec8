"""`quorumlog members` against real nodes: list, add, promote, set-address (a follower moved to a new port),
remove and their refusals; force-recover of a group that lost two of its three members for good; and
local-cluster's spares."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quorumlog.client import AsyncClient, Client
from quorumlog.server.cluster import LocalCluster, free_ports

from .conftest import committed_entries, make_leader, wait_until
from .test_server_cli import free_range, read_banner

QL = [sys.executable, "-m", "quorumlog"]


def ql(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QL, *args], capture_output=True, text=True, timeout=timeout, env=env)


def members_json(eps: list[str]) -> dict[str, Any]:
    r = ql("members", "list", *eps, "--json")
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in doc["members"]}


def test_members_list_add_promote_move_and_remove(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(nodes=4, spares=1)
    spare = cluster.nodes[3]
    eps = ["--endpoints", ",".join(n.address for n in cluster.members), "--group", "g0"]
    assert ql("append", *eps, "one", "two", "three").returncode == 0

    doc = members_json(eps)
    members = by_id(doc)
    assert sorted(members) == ["n0", "n1", "n2"]
    assert all(m["role"] == "voter" for m in members.values())
    assert [m["id"] for m in members.values() if m["leader"]] == [doc["leader"]]
    assert all(m["address"] == n.address for n, m in zip(cluster.members, members.values(), strict=True))
    wait_until(lambda: all(m["lag"] == 0 for m in by_id(members_json(eps)).values()), 20, "every member caught up")
    table = ql("members", "list", *eps)
    assert table.returncode == 0 and "voter, leader" in table.stdout, table.stdout + table.stderr
    assert all(n.address in table.stdout for n in cluster.members), table.stdout

    # A node that never answers stays a learner: promoted, it would be a voter the quorum waits for.
    (nowhere,) = free_ports(1)
    r = ql("members", "add", *eps, "--id", "n7", "--address", f"127.0.0.1:{nowhere}", "--timeout", "3")
    assert r.returncode != 0 and "FALL_BEHIND_TOO_MUCH" in r.stderr and "is n7 running" in r.stderr, r.stderr
    assert by_id(members_json(eps))["n7"]["role"] == "learner"
    r = ql("members", "remove", *eps, "--id", "n7")
    assert r.returncode == 0 and "voters n0, n1, n2; learners none" in r.stdout, r.stdout + r.stderr

    # The spare joins as a learner, then is promoted.
    r = ql("members", "add", *eps, "--id", "n3", "--address", spare.address, "--learner")
    assert r.returncode == 0, r.stderr
    assert "voters n0, n1, n2; learners n3" in r.stdout, r.stdout
    added_at = int(re.search(r"CONFIG entry (\d+)", r.stdout).group(1))  # type: ignore[union-attr]
    assert added_at > doc["end_index"]
    n3 = wait_until(lambda: (m := by_id(members_json(eps))["n3"])["lag"] == 0 and m, 30, "the learner caught up")
    assert n3["role"] == "learner" and n3["address"] == spare.address and n3["match_index"] >= added_at
    r = ql("members", "promote", *eps, "--id", "n3", "--json")
    assert r.returncode == 0, r.stderr
    promoted = json.loads(r.stdout)
    assert promoted["voters"] == ["n0", "n1", "n2", "n3"] and promoted["learners"] == []
    assert promoted["index"] > added_at

    # A follower moves: stopped, the members told its new address, started there.
    leader = members_json(eps)["leader"]
    i = next(k for k, n in enumerate(cluster.members) if n.node_id != leader)
    moving = cluster.nodes[i]
    cluster.kill(i, signal.SIGTERM)
    (new_port,) = free_ports(1)
    old_address = moving.address
    text = moving.config_path.read_text()
    assert f'listen = "{old_address}"' in text
    moving.config_path.write_text(text.replace(f'listen = "{old_address}"', f'listen = "127.0.0.1:{new_port}"'))
    moving.port = new_port
    r = ql("members", "set-address", *eps, "--id", moving.node_id, "--address", moving.address)
    assert r.returncode == 0, r.stderr
    assert "voters n0, n1, n2, n3" in r.stdout and "CONFIG entry" in r.stdout, r.stdout
    assert ql("append", *eps, "while-it-moved").returncode == 0
    cluster.start(i)
    # Only the new address reaches it: caught up means the leader pushed there.
    end = members_json(eps)["end_index"]
    moved = wait_until(lambda: (m := by_id(members_json(eps))[moving.node_id])["match_index"] >= end and m, 30,
                       f"{moving.node_id} caught up at its new address")
    assert moved["address"] == moving.address != old_address
    with Client(moving.address, group="g0") as c:
        assert c.node_status(moving.address)["groups"]["g0"]["end_index"] >= end

    r = ql("members", "remove", *eps, "--id", "n3")
    assert r.returncode == 0, r.stderr
    assert "voters n0, n1, n2; learners none" in r.stdout, r.stdout

    # Refusals: the reason, in one line, and a non-zero status.
    r = ql("members", "remove", *eps, "--id", "n9", "--timeout", "5")
    assert r.returncode != 0 and "not a member" in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = ql("members", "add", *eps, "--id", "n0", "--address", cluster.nodes[0].address, "--timeout", "5")
    assert r.returncode != 0 and "voter already" in r.stderr, r.stdout + r.stderr
    r = ql("members", "promote", *eps, "--id", "n9", "--timeout", "5")
    assert r.returncode != 0 and "not a member" in r.stderr, r.stdout + r.stderr
    r = ql("members", "set-address", *eps, "--id", "n9", "--address", "127.0.0.1:1", "--timeout", "5")
    assert r.returncode != 0 and "not a member" in r.stderr, r.stdout + r.stderr
    assert sorted(by_id(members_json(eps))) == ["n0", "n1", "n2"]


def test_force_recover_makes_the_last_node_a_group_of_one(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(nodes=3)
    n0 = cluster.nodes[0]

    async def lead_and_write() -> tuple[list[bytes], int]:
        async with AsyncClient(cluster.endpoints, group="g0", retry_timeout=30) as c:
            await make_leader(c, cluster, "n0")  # the node kept then holds every acknowledged entry
            bodies = [f"e{k}".encode() for k in range(40)]
            for b in bodies:
                await c.append(b)
            return bodies, (await c.node_status(n0.address))["groups"]["g0"]["term"]

    bodies, old_term = asyncio.run(lead_and_write())
    store = n0.data_dir / "g0" / "n0"
    recover = ["members", "force-recover", "--group", "g0", "--keep", "n0", "--data-dir", str(n0.data_dir)]

    # A running node's store is locked: refused, naming the node's pid (the store found through its config).
    assert n0.proc is not None
    r = ql("members", "force-recover", "--group", "g0", "--keep", "n0", "--config", str(n0.config_path), "--yes")
    assert r.returncode != 0 and f"locked by pid {n0.proc.pid}" in r.stderr and "stop it" in r.stderr, r.stderr

    statuses = cluster.stop()
    assert all(code == 0 for code in statuses.values()), statuses
    for n in cluster.nodes[1:]:
        shutil.rmtree(n.data_dir / "g0")  # gone for good
    before = sorted(p.name for p in store.iterdir())
    currterm = (store / "currterm").read_bytes()

    # Without --yes: refused, saying why, and the store left alone.
    r = ql(*recover)
    assert r.returncode != 0 and "--yes" in r.stderr and "unsafe" in r.stderr, r.stderr
    assert sorted(p.name for p in store.iterdir()) == before and (store / "currterm").read_bytes() == currterm
    r = ql("members", "force-recover", "--group", "g0", "--keep", "n1", "--data-dir", str(n0.data_dir), "--yes")
    assert r.returncode != 0 and "does not name this node (n0)" in r.stderr, r.stderr

    r = ql(*recover, "--yes")  # (the node id found: the only store of g0 under the data directory)
    assert r.returncode == 0, r.stderr
    last = int(re.search(r"last index (\d+)", r.stdout).group(1))  # type: ignore[union-attr]
    committed = int(re.search(r"commit index (\d+)", r.stdout).group(1))  # type: ignore[union-attr]
    assert committed <= last and "voters n0" in r.stdout and "lost" in r.stdout, r.stdout

    cluster.start(0)

    async def check() -> None:
        async with AsyncClient(n0.address, group="g0", retry_timeout=30) as c:
            async def led() -> dict[str, Any] | None:
                with contextlib.suppress(Exception):
                    doc = (await c.node_status(n0.address))["groups"]["g0"]
                    return dict(doc) if doc["role"] == "leader" and doc["committed_index"] > last else None
                return None

            deadline = asyncio.get_running_loop().time() + 30
            doc = await led()
            while doc is None:
                assert asyncio.get_running_loop().time() < deadline, "n0 never led alone"
                await asyncio.sleep(0.1)
                doc = await led()
            assert list(doc["config"]["voters"]) == ["n0"] and not doc["config"]["learners"]
            assert doc["term"] > old_term + 1  # above the forced configuration's term
            held = [b for _, b in await committed_entries(n0.address)]
            assert held == bodies, held  # every entry it had, once each and in order
            after = await c.append(b"after-recovery")
            assert after.index > last and after.term == doc["term"]

    asyncio.run(check())

    # The group grows again: a lost member comes back empty, joins and is promoted.
    n1 = cluster.nodes[1]
    n1.config_path.write_text(n1.config_path.read_text().replace('name = "g0"\n', 'name = "g0"\njoin = true\n'))
    cluster.start(1)
    r = ql("members", "add", "--endpoints", n0.address, "--id", "n1", "--address", n1.address)
    assert r.returncode == 0 and "voters n0, n1; learners none" in r.stdout, r.stdout + r.stderr
    wait_until(lambda: asyncio.run(committed_entries(n1.address)) == asyncio.run(committed_entries(n0.address)),
               30, "n1 holding n0's log")
    assert [b for _, b in asyncio.run(committed_entries(n1.address))] == [*bodies, b"after-recovery"]




def test_local_cluster_starts_spares_and_says_how_to_add_one(tmp_path: Path) -> None:
    base = free_range(4)
    data = tmp_path / "data"
    proc = subprocess.Popen([*QL, "local-cluster", "--nodes", "3", "--spares", "1", "--data-dir", str(data),
                             "--base-port", str(base)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    try:
        lines = read_banner(proc)
        if "not free" in "".join(lines):
            pytest.skip("the port range was taken")
        spare = f"127.0.0.1:{base + 3}"
        hint = f"  quorumlog members add --group g0 --id n3 --address {spare}"
        assert hint in lines, lines
        assert any(line.startswith(f"  n3  {spare}  ") and line.endswith("(spare)") for line in lines), lines
        eps = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        assert f"endpoints: {eps}" in lines, lines  # the members: a spare serves no group yet
        env = {**os.environ, "QUORUMLOG_SECRET_FILE": str(data / "secret"), "QUORUMLOG_ENDPOINTS": eps}
        # The hint as printed: the spare runs, joins and is promoted.
        r = subprocess.run([*QL, *hint.split()[1:]], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0 and "voters n0, n1, n2, n3" in r.stdout, r.stdout + r.stderr
        r = subprocess.run([*QL, "members", "list", "--json"], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        n3 = by_id(json.loads(r.stdout))["n3"]
        assert n3["role"] == "voter" and n3["match_index"] >= 0, n3  # it answered: it runs
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "n3 exit 0" in out, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for line in lines:  # the nodes it started, by pid, in case it was killed before it stopped them
            if " pid " in line:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(line.split(" pid ", 1)[1].split()[0]), signal.SIGKILL)


def test_local_cluster_refuses_spares_for_primary_backup_without_a_controller(tmp_path: Path) -> None:
    r = ql("local-cluster", "--spares", "1", "--replication", "primary-backup", "--data-dir", str(tmp_path / "d"),
           timeout=30)
    assert r.returncode == 2 and "changes its members through its controller" in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()
