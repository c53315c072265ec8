"""The replication cores are pure: no I/O modules, no clock, no threads, no global randomness (docs/design.md §1).

Checked over raft/ (Raft), ha/ (primary/backup) and core/ (what both build on), each a package of small
modules without import circles; core/ imports neither of the others, and they share only core/.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import quorumlog

ROOT = Path(quorumlog.__file__).parent
PACKAGES = ("raft", "core", "ha")
FORBIDDEN = {"asyncio", "socket", "threading", "time", "selectors", "multiprocessing", "subprocess",
             "concurrent", "datetime", "os", "uuid", "secrets"}
# `random` may be imported only for the random.Random type; calling module-level functions is global state.
RANDOM_ALLOWED = {"Random"}
# quorumlog's packages a core must not reach: the drivers (network, server, simulator) and the front ends.
OUTSIDE = {"net", "server", "sim", "client", "cli", "commands", "spark"}
# Imports between the cores. The controller core (ha/controller_core.py) reads its node's replica of the
# controller group, a RaftNode, and the record (ha/record.py) follows that group's configuration (its
# CONFIG entries): those are the two things ha/ takes from raft/.
BETWEEN = {"core": set(), "raft": set(), "ha": {"raft.node", "raft.membership"}}


def _modules(package: str) -> list[Path]:
    files = sorted((ROOT / package).glob("*.py"))
    assert len(files) >= 5, files
    return files


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _quorumlog_imports(path: Path) -> set[str]:
    """The quorumlog modules outside its own package that `path` imports, as "package.module"."""
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.level == 2:
            found.update([node.module] if node.module else [a.name for a in node.names])  # (from .. import x)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("quorumlog."):
            found.add((node.module or "").removeprefix("quorumlog."))
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("quorumlog.") for a in node.names if a.name.startswith("quorumlog."))
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_import_no_io_clock_or_threads(package: str) -> None:
    offenders = []
    for path in _modules(package):
        for node in ast.walk(_tree(path)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{path.name}: import {name}")
            if isinstance(node, ast.ImportFrom) and node.module == "random":
                bad = [a.name for a in node.names if a.name not in RANDOM_ALLOWED]
                if bad:
                    offenders.append(f"{path.name}: from random import {bad}")
    assert not offenders, offenders


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_use_no_global_random(package: str) -> None:
    offenders = []
    for path in _modules(package):
        for node in ast.walk(_tree(path)):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "random" and node.attr not in RANDOM_ALLOWED):
                offenders.append(f"{path.name}:{node.lineno}: random.{node.attr}")
    assert not offenders, offenders


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_stay_small(package: str) -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in _modules(package)}
    assert all(n <= 500 for n in sizes.values()), sizes


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_do_not_import_net_server_or_sim(package: str) -> None:
    offenders = [f"{path.name}: {mod}" for path in _modules(package) for mod in _quorumlog_imports(path)
                 if mod.split(".")[0] in OUTSIDE]
    assert not offenders, offenders


@pytest.mark.parametrize("package", PACKAGES)
def test_cores_share_only_core(package: str) -> None:
    """raft/ and ha/ build on core/; core/ imports neither, and neither takes the other's internals."""
    others = set(PACKAGES) - {package, "core"}
    offenders = [f"{path.name}: {mod}" for path in _modules(package) for mod in _quorumlog_imports(path)
                 if (mod.split(".")[0] in others or (package == "core" and mod.split(".")[0] in PACKAGES))
                 and mod not in BETWEEN[package]]
    assert not offenders, offenders


def _local_imports(path: Path) -> set[str]:
    """The modules of its own package `path` imports (`from .x import ...`), type-checking-only imports
    included."""
    return {node.module.split(".")[0] for node in ast.walk(_tree(path))
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}


def _graph(package: str) -> dict[str, set[str]]:
    return {p.stem: _local_imports(p) for p in _modules(package) if p.stem != "__init__"}


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_import_no_circle(package: str) -> None:
    graph = _graph(package)
    done: set[str] = set()

    def visit(mod: str, path: list[str]) -> None:
        assert mod not in path, " -> ".join(path + [mod])
        if mod in done:
            return
        for dep in graph.get(mod, ()):
            visit(dep, path + [mod])
        done.add(mod)

    for mod in graph:
        visit(mod, [])


def test_the_node_drives_the_elector_never_the_other_way() -> None:
    """The node drives the elector and the driver drives the node: a module that calls back into the node
    would be a second writer of its state."""
    assert "node" not in _graph("raft")["elector"]


def test_only_the_node_writes_role_term_leader_and_vote() -> None:
    offenders = []
    for path in _modules("raft"):
        if path.stem in ("node", "member", "rejoin", "transitions"):  # (rejoin.py, transitions.py: RaftNode mixins)
            continue
        for node in ast.walk(_tree(path)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AugAssign | ast.AnnAssign) else []
            for t in targets:
                # A class's own copy (self.term of the Leader, fixed for its term) is not the member's state.
                own = isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                if isinstance(t, ast.Attribute) and t.attr in ("role", "term", "leader_id", "voted_for") and not own:
                    offenders.append(f"{path.name}:{node.lineno}: {ast.unparse(t)} =")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set_term":
                offenders.append(f"{path.name}:{node.lineno}: set_term")
    assert not offenders, offenders
