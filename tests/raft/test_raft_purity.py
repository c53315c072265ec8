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
