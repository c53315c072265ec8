"""Membership changes of a primary/backup group with a controller, on real processes under writers that
never stop, each checked by the history checker (every acknowledged append in the log exactly once; the
members' committed logs identical). A change of its members is its controller group's (ha/record.py): a
spare added streams the log from the start and joins the in-sync set; a backup removed leaves it; the
primary is replaced by promoting the new member and removing the old one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from quorumlog import AsyncClient
from quorumlog.errors import QuorumLogError, ResponseCode
from quorumlog.server.cluster import LocalCluster, LocalNode, free_ports

from .conftest import await_until, node_index
from .test_server_controller import HA
from .test_server_member_changes import _under_writers

PB = {"replication": "primary-backup", "ha": HA}


async def _group(c: AsyncClient, node: LocalNode) -> dict[str, Any]:
    return dict((await c.node_status(node.address))["groups"]["g0"])


async def _primary(c: AsyncClient, nodes: list[LocalNode]) -> dict[str, Any] | None:
    for n in nodes:
        try:
            d = await _group(c, n)
        except (QuorumLogError, OSError):
            continue
        if d["role"] == "leader" and d.get("confirmed"):
            return d
    return None


async def _in_sync(c: AsyncClient, nodes: list[LocalNode], member: str) -> bool:
    d = await _primary(c, nodes)
    return d is not None and member in d.get("in_sync", [])


def test_a_backup_is_added_and_another_removed(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory(nodes=4, spares=1, **PB)
    spare = cluster.nodes[3]
    gone: list[str] = []

    async def change(c: AsyncClient) -> None:
        m = await c.add_member("n3", spare.address, timeout=60)
        assert "n3" in m.voters  # (of the controller group: every member of g0 is one)
        await await_until(lambda: _in_sync(c, cluster.nodes, "n3"), 30, "n3 in the in-sync set")
        primary = await _primary(c, cluster.nodes)
        assert primary is not None and list(primary["members"]) == ["n0", "n1", "n2", "n3"]
        backup = next(m for m in ("n1", "n2") if m != primary["node"])
        with pytest.raises(QuorumLogError, match="is the primary of group g0") as e:
            await c.remove_member(primary["node"])
        assert e.value.code == ResponseCode.UNEXPECTED_ARGUMENT
        await c.remove_member(backup)

        async def left() -> bool:  # (the primary applies the record at its next tick)
            after = await _primary(c, cluster.nodes)
            return after is not None and backup not in after["in_sync"] and backup not in after["members"]

        await await_until(left, 5, f"{backup} out of the primary's members and in-sync set")
        cluster.kill(node_index(cluster, backup))
        gone.append(backup)
        assert (await c.members()).voters == sorted({"n0", "n1", "n2", "n3"} - {backup})

    asyncio.run(_under_writers(cluster, cluster.nodes, lambda: [n for n in cluster.nodes if n.node_id not in gone],
                               change))


def test_the_primarys_machine_is_replaced(cluster_factory: Any) -> None:
    """A spare is added, caught up and promoted primary (the controller elects it), then the old primary is
    removed and killed: the writers go on with the new one."""
    cluster: LocalCluster = cluster_factory(nodes=4, spares=1, **PB)
    spare = cluster.nodes[3]
    gone: list[str] = []

    async def replace(c: AsyncClient) -> None:
        await c.add_member("n3", spare.address, timeout=60)
        await await_until(lambda: _in_sync(c, cluster.nodes, "n3"), 30, "n3 in the in-sync set")
        old = await _primary(c, cluster.nodes)
        assert old is not None
        assert (await c.promote("n3"))[0] == "n3"
        await await_until(lambda: _primary(c, [spare]), 20, "n3 the confirmed primary")
        await c.remove_member(old["node"])
        cluster.kill(node_index(cluster, old["node"]))
        gone.append(old["node"])

    asyncio.run(_under_writers(cluster, cluster.nodes, lambda: [n for n in cluster.nodes if n.node_id not in gone],
                               replace))


def test_a_backup_moves_to_a_new_port(cluster_factory: Any) -> None:
    """set-address of a backup, committed while it is down: it restarts at the new port with its data, the
    primary streams to it there, and it is in sync again."""
    cluster: LocalCluster = cluster_factory(nodes=3, **PB)

    async def move(c: AsyncClient) -> None:
        primary = await _primary(c, cluster.nodes)
        assert primary is not None
        mover = next(n for n in cluster.nodes if n.node_id != primary["node"])
        cluster.kill(node_index(cluster, mover.node_id))
        mover.port = free_ports(1)[0]
        m = await c.set_member_address(mover.node_id, mover.address)
        assert m.addresses[mover.node_id] == mover.address
        cluster.write_configs()
        cluster.start(node_index(cluster, mover.node_id))
        await await_until(lambda: _in_sync(c, cluster.nodes, mover.node_id), 30, "the moved backup in sync")

    asyncio.run(_under_writers(cluster, cluster.nodes, lambda: cluster.nodes, move))


def test_members_restarted_with_the_new_list_rejoin(cluster_factory: Any) -> None:
    """After a backup is added, the operator writes the new member list into every node's configuration (the
    added one loses `join = true`) and restarts a backup and the new member: they are taken back at HELLO
    (a primary/backup group with a controller names no member digest: its members change with its
    controller group's, whose id is compared) and are in sync again."""
    cluster: LocalCluster = cluster_factory(nodes=4, spares=1, **PB)
    spare = cluster.nodes[3]

    async def change(c: AsyncClient) -> None:
        await c.add_member("n3", spare.address, timeout=60)
        await await_until(lambda: _in_sync(c, cluster.nodes, "n3"), 30, "n3 in the in-sync set")
        primary = await _primary(c, cluster.nodes)
        assert primary is not None
        cluster.spares = 0
        cluster.write_configs()
        for node in [n for n in cluster.nodes if n.node_id in ("n1", "n2", "n3") and n.node_id != primary["node"]]:
            cluster.kill(node_index(cluster, node.node_id))
            cluster.start(node_index(cluster, node.node_id))
            await await_until(lambda node=node: _in_sync(c, cluster.nodes, node.node_id), 30,
                              f"{node.node_id} in sync again after its restart with the new list")

    asyncio.run(_under_writers(cluster, cluster.nodes, lambda: cluster.nodes, change))
