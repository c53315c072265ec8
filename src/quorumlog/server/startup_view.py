"""`quorumlog local-cluster` start-up, shown on a terminal: a spinner per node until it answers on its admin
port, and per group until it has a leader. Nothing is shown, and nothing waited for, when stderr is not
a terminal (the cluster's own output is unchanged for scripts and tests)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from ..progress import progress
from .cluster import LocalCluster, LocalNode

POLL_S = 0.2


def _status(node: LocalNode) -> dict[str, Any] | None:
    """The node's /status document, or None while it does not answer."""
    try:
        with urllib.request.urlopen(node.admin_url + "/status", timeout=1.0) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return doc if isinstance(doc, dict) else None


def watch_startup(cluster: LocalCluster, console: Console, stopped: Callable[[], bool],
                  timeout: float = 60.0) -> dict[str, str]:
    """Until every node is up and every group has a leader (or `timeout`, or `stopped()`), show where the
    start-up is; return each group's leader found. Returns at once when `console` is not a terminal."""
    bar = progress(SpinnerColumn(finished_text="[green]✓[/green]"), TextColumn("{task.description}"),
                   TimeElapsedColumn(), console=console)
    if bar.disable:
        return {}
    nodes: dict[str, TaskID] = {}
    groups: dict[str, TaskID] = {}
    up: set[str] = set()
    gone: set[str] = set()
    leaders: dict[str, str] = {}
    with bar:
        for n in cluster.nodes:
            nodes[n.node_id] = bar.add_task(f"{n.node_id}  {n.address}  starting", total=1)
        for g in cluster.group_names:
            groups[g] = bar.add_task(f"{g}  electing a leader", total=1)
        deadline = time.monotonic() + timeout
        while not stopped() and time.monotonic() < deadline:
            for n in cluster.nodes:
                if n.node_id in gone or (n.node_id in up and set(groups) <= set(leaders)):
                    continue
                if n.proc is None or n.proc.poll() is not None:
                    gone.add(n.node_id)
                    code = n.proc.returncode if n.proc is not None else "-"
                    bar.update(nodes[n.node_id], completed=1, description=f"[red]{n.node_id}  exited with status "
                               f"{code}: see {n.log_path}[/red]")
                    continue
                doc = _status(n)
                if doc is None:
                    continue
                if n.node_id not in up:
                    up.add(n.node_id)
                    bar.update(nodes[n.node_id], completed=1, description=f"{n.node_id}  {n.address}  up")
                _note_leaders(doc, leaders)
            for g, leader in leaders.items():
                if g in groups:
                    bar.update(groups[g], completed=1, description=f"{g}  leader {leader}")
            if len(up) + len(gone) == len(nodes) and set(groups) <= set(leaders):
                break
            time.sleep(POLL_S)
    return leaders


def _note_leaders(doc: dict[str, Any], leaders: dict[str, str]) -> None:
    """The groups this node's status says it leads (only a leader's own word counts)."""
    groups = doc.get("groups")
    if not isinstance(groups, dict):
        return
    for name, g in groups.items():
        if isinstance(g, dict) and g.get("role") == "leader" and isinstance(g.get("node"), str):
            leaders[name] = g["node"]
