"""`quorumlog serve` and `quorumlog local-cluster`."""

from __future__ import annotations

import argparse
import os

from ..argtypes import base_port, non_negative, port, positive
from .client_cmds import add_secret_arg, read_secret


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run one node", description=(
        "Run one node: every group it belongs to, on one port for peers and clients. Settings come from "
        "--config node.toml, or from the flags (flags override the file's top-level settings). SIGTERM or "
        "Ctrl-C flushes, checkpoints and exits 0."))
    p.add_argument("--config", help="node TOML file")
    p.add_argument("--id", dest="node_id", help="this node's id (must be in --peers); with --config it replaces "
                                                "the file's id, so one file can serve every node")
    p.add_argument("--group", action="append", help="group name(s) hosted; repeatable or comma list (default g0)")
    p.add_argument("--peers", help="every member: n0=127.0.0.1:9000,n1=127.0.0.1:9001,...")
    p.add_argument("--data-dir", help="data directory (stores live in DIR/<group>/<id>)")
    p.add_argument("--listen", help="host:port to bind (default: this node's address in --peers)")
    admin = p.add_mutually_exclusive_group()
    admin.add_argument("--admin-port", type=port, help="serve the admin HTTP port (/status, /metrics, the "
                       "dashboard) on 127.0.0.1 at this port (or on the host of the file's admin_listen)")
    admin.add_argument("--admin-listen", metavar="HOST:PORT", help="serve the admin HTTP port on this address; "
                       "beyond loopback it needs an admin token (or --insecure-admin)")
    p.add_argument("--admin-token-file", help="file holding the admin port's bearer token (default: "
                   "$QUORUMLOG_ADMIN_TOKEN_FILE, else the token in $QUORUMLOG_ADMIN_TOKEN, if set)")
    p.add_argument("--insecure-admin", action="store_true", default=None,
                   help="serve the admin port on a non-loopback address without a token (refused otherwise)")
    p.add_argument("--cluster", help="cluster name checked at HELLO (default quorumlog)")
    add_secret_arg(p)
    p.add_argument("--flush", choices=("sync", "async"), help="fdatasync before acks (sync, default) or not")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="listen on a non-loopback address without a secret (refused otherwise)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    p.set_defaults(func=_serve)

    p = sub.add_parser("local-cluster", help="run a whole cluster on this machine", description=(
        "Start N `quorumlog serve` processes on 127.0.0.1, print their endpoints and admin URLs, and stop them "
        "all cleanly on Ctrl-C or SIGTERM. Nothing is restarted automatically."))
    p.add_argument("--nodes", type=positive, default=3, help="number of nodes (default 3)")
    p.add_argument("--spares", type=non_negative, default=0,
                   help="also start this many spare nodes, members of no group until added (quorumlog members "
                        "add); Raft only (default 0)")
    p.add_argument("--groups", type=positive, default=1,
                   help="number of groups g0..gN-1, each on every node (default 1)")
    p.add_argument("--data-dir", required=True, help="data directory; node i uses DIR/n<i>")
    p.add_argument("--base-port", type=base_port, default=9000,
                   help="node i listens on P+i, its admin HTTP on P+100+i (default 9000)")
    p.add_argument("--flush", choices=("sync", "async"), default="sync")
    p.add_argument("--segment-mb", type=positive, default=64,
                   help="data segment size in MiB (default 64: a laptop-sized cluster; nodes default to 1024)")
    add_secret_arg(p)
    p.add_argument("--no-auth", dest="auth", action="store_false",
                   help="no shared secret (by default one is made and kept in DATA_DIR/secret)")
    p.add_argument("--log-level", default="WARNING", help="log level of the nodes (default WARNING)")
    p.add_argument("--replication", choices=("raft", "primary-backup"), default="raft",
                   help="raft (default), or primary-backup with n0 the first primary (docs/replication.md)")
    p.add_argument("--ack", choices=("sync", "async"), default="sync", help="primary-backup: when producers are "
                   "answered (sync: once the in-sync backups have the entry; default)")
    p.add_argument("--controller", action="store_true",
                   help="primary-backup: add a Raft controller group 'ctl' for automatic failover")
    p.set_defaults(func=_local_cluster)


def _serve(args: argparse.Namespace) -> int:
    from ..server.main import config_from_flags, run_serve

    cfg = config_from_flags(config=args.config, node_id=args.node_id, groups=args.group, peers=args.peers,
                            data_dir=args.data_dir, admin_port=args.admin_port, cluster=args.cluster,
                            secret=read_secret(args), listen=args.listen, flush=args.flush,
                            insecure=args.insecure, admin_listen=args.admin_listen,
                            admin_token=read_admin_token(args), insecure_admin=args.insecure_admin)
    return run_serve(cfg, args.log_level)


def read_admin_token(args: argparse.Namespace) -> str | None:
    """The admin token from --admin-token-file, else the file $QUORUMLOG_ADMIN_TOKEN_FILE names, else
    $QUORUMLOG_ADMIN_TOKEN, else None: never from the command line, where `ps` shows it."""
    from ..config import read_secret_file

    path = args.admin_token_file or os.environ.get("QUORUMLOG_ADMIN_TOKEN_FILE")
    if path:
        return read_secret_file(path)
    return os.environ.get("QUORUMLOG_ADMIN_TOKEN") or None


def _local_cluster(args: argparse.Namespace) -> int:
    from ..server.cluster import run_local_cluster

    return run_local_cluster(nodes=args.nodes, spares=args.spares, groups=args.groups, data_dir=args.data_dir,
                             base_port=args.base_port, flush=args.flush, secret=read_secret(args),
                             log_level=args.log_level, segment_mb=args.segment_mb, replication=args.replication,
                             auth=args.auth,
                             ha={"ack": args.ack, **({"controller": "ctl"} if args.controller else {})})
