"""`quorumlog serve`: build a NodeConfig from a TOML file or flags and run the node until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

from ..config import GroupConfig, NodeConfig, RaftConfig, StoreConfig, load_node_config, parse_peers
from ..errors import ConfigError
from ..untrusted import EscapingFormatter


def config_from_flags(*, config: str | None, node_id: str | None, groups: list[str] | None, peers: str | None,
                      data_dir: str | None, admin_port: int | None, cluster: str | None, secret: str | None,
                      listen: str | None = None, flush: str | None = None,
                      insecure: bool | None = None, admin_listen: str | None = None,
                      admin_token: str | None = None, insecure_admin: bool | None = None) -> NodeConfig:
    """A NodeConfig from --config, with flags overriding its top-level settings; or from flags alone.

    The admin port (`admin_port`) is served on 127.0.0.1, or on the host of the file's admin_listen;
    `admin_listen` (host:port) puts it anywhere."""
    if config is not None:
        cfg = load_node_config(config, node_id)  # --id before validation: the file may name another node, or none
        changes: dict[str, object] = {}
        if not listen and cfg.groups and "listen" not in _toml_keys(config):
            # No explicit listen address: the node's own address in its groups' peer list.
            listen = cfg.groups[0].peers.get(cfg.node_id)
        if data_dir:
            changes["data_dir"] = Path(data_dir)
        if cluster:
            changes["cluster"] = cluster
        if secret:
            changes["secret"] = secret
        if listen:
            changes["listen"] = listen
        if insecure is not None:
            changes["insecure"] = insecure
        if insecure_admin is not None:
            changes["insecure_admin"] = insecure_admin
        if admin_token:
            changes["admin_token"] = admin_token
        if admin_listen:
            changes["admin_listen"] = admin_listen
        elif admin_port is not None:
            changes["admin_listen"] = f"{_host(cfg.admin_listen or '')}:{admin_port}"
        if changes:
            import dataclasses

            cfg = dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]
        return cfg
    missing = [name for name, v in (("--id", node_id), ("--peers", peers), ("--data-dir", data_dir)) if not v]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)} (or give --config node.toml)")
    assert node_id and peers and data_dir
    peer_map = parse_peers(peers)
    if node_id not in peer_map:
        raise ConfigError(f"--id {node_id!r} is not in --peers ({', '.join(peer_map)})")
    names = [n.strip() for g in (groups or ["g0"]) for n in g.split(",") if n.strip()]
    store = StoreConfig(flush=flush or "sync")  # type: ignore[arg-type]
    gcfgs = tuple(GroupConfig(name=n, peers=peer_map, raft=RaftConfig(), store=store) for n in dict.fromkeys(names))
    my_addr = listen or peer_map[node_id]
    return NodeConfig(node_id=node_id, data_dir=Path(data_dir), groups=gcfgs, cluster=cluster or "quorumlog",
                      listen=my_addr, admin_listen=admin_listen or (f"127.0.0.1:{admin_port}" if admin_port else None),
                      secret=secret, insecure=bool(insecure), admin_token=admin_token,
                      insecure_admin=bool(insecure_admin))


def _toml_keys(path: str) -> set[str]:
    import tomllib

    with open(path, "rb") as f:
        return set(tomllib.load(f))


def _host(addr: str) -> str:
    return addr.rpartition(":")[0] or "127.0.0.1"


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def keep_freed_memory() -> bool:
    """Make glibc keep the memory a node frees for its next allocations, not hand it back to the kernel.

    A node allocates and frees batch-sized buffers (up to a frame, 16 MiB) many times a second. By default
    glibc serves them with mmap or trims them off the heap once freed, so each new buffer is fresh memory
    the kernel must fault in and zero; on a VM that returns freed memory to its host, each fault is also
    an exit. Kept on the heap they are reused: +10 % appends per second in the 1 KiB bench here
    (docs/performance.md). The heap then stays at its peak, which the frame and buffer limits bound."""
    import ctypes
    import ctypes.util

    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc: its allocator keeps its own policy
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, 64 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 256 << 20))


def run_serve(cfg: NodeConfig, log_level: str = "INFO") -> int:
    """Run a node to completion; returns its exit status."""
    from ..net.loop import loop_factory
    from .node import NodeServer

    keep_freed_memory()

    handler = logging.StreamHandler(sys.stderr)
    # Escaped: text from the network (a HELLO's node id, a GOODBYE's reason) cannot forge a log line.
    handler.setFormatter(EscapingFormatter(f"%(asctime)s {cfg.node_id} %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO), handlers=[handler])

    async def main() -> int:
        node = NodeServer(cfg)
        return await node.run()

    profile_dir = os.environ.get("QUORUMLOG_PROFILE")
    profiler = None
    if profile_dir:  # profiling a node under load: cProfile of the loop thread, dumped on exit
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            return runner.run(main())
    finally:
        if profiler is not None and profile_dir:
            profiler.disable()
            profiler.dump_stats(os.path.join(profile_dir, f"{cfg.node_id}.prof"))
