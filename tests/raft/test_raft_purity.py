"""The Raft core is pure: no I/O modules, no clock, no threads, no global randomness (DESIGN §1)."""

from __future__ import annotations

import ast
from pathlib import Path

import quorumlog.raft

RAFT_DIR = Path(quorumlog.raft.__file__).parent
FORBIDDEN = {"asyncio", "socket", "threading", "time", "selectors", "multiprocessing", "subprocess",
             "concurrent", "datetime", "os", "uuid", "secrets"}
# `random` may be imported only for the random.Random type; calling module-level functions is global state.
RANDOM_ALLOWED = {"Random"}


def _modules() -> list[Path]:
    files = sorted(RAFT_DIR.glob("*.py"))
    assert len(files) >= 7, files
    return files


def test_raft_modules_import_no_io_clock_or_threads() -> None:
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
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


def test_raft_modules_use_no_global_random() -> None:
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "random" and node.attr not in RANDOM_ALLOWED):
                offenders.append(f"{path.name}:{node.lineno}: random.{node.attr}")
    assert not offenders, offenders


def test_raft_modules_stay_small() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in _modules()}
    assert all(n <= 500 for n in sizes.values()), sizes


def test_raft_core_does_not_import_net_server_or_sim() -> None:
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
                assert node.module.split(".")[0] not in {"net", "server", "sim", "client", "cli"}, path.name


def _local_imports(path: Path) -> set[str]:
    """The raft modules `path` imports (`from .x import ...`), type-checking-only imports included."""
    tree = ast.parse(path.read_text(), str(path))
    return {node.module.split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}


def test_raft_modules_import_no_circle() -> None:
    """The node drives the elector and the driver drives the node, never the other way round: a module
    that calls back into the node would be a second writer of its state."""
    graph = {p.stem: _local_imports(p) for p in _modules() if p.stem != "__init__"}
    assert "node" not in graph["elector"] and "node" not in graph["ready"]
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


def test_only_the_node_writes_role_term_leader_and_vote() -> None:
    offenders = []
    for path in _modules():
        if path.stem in ("node", "member"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
