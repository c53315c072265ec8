"""`quorumlog certs init`: a private CA and certificates for a cluster's nodes and clients (docs/security.md)."""

from __future__ import annotations

import argparse

from ..argtypes import positive


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("certs", help="make TLS certificates for a cluster", description=(
        "init: a private CA (ca.pem, ca.key) and a certificate and key per node and client in DIR, each "
        "naming its holder's id; nodes then set tls_cert, tls_key and tls_ca in their TOML. Client "
        "certificates are for client use only. What a client certificate may do, on nodes without a shared "
        "secret: one naming 'client' everything (it is the cluster's admin credential); one naming "
        "'client:NAME' what the nodes' [[token]] NAME allows (a token with no secret stands for such "
        "certificates), and nothing without one."))
    p.add_argument("action", choices=("init",))
    p.add_argument("--dir", required=True, help="directory to write into")
    p.add_argument("--nodes", required=True, help="node ids, comma separated (n0,n1,n2)")
    p.add_argument("--clients", default="client",
                   help="client ids: client, or client:<token> (default client), comma separated")
    p.add_argument("--hosts", default="127.0.0.1,localhost",
                   help="addresses and names the nodes are reached at (default 127.0.0.1,localhost)")
    p.add_argument("--days", type=positive, default=825, help="validity in days (default 825)")
    p.set_defaults(func=_init)


def _init(args: argparse.Namespace) -> int:
    from ..tls import init_certs

    def ids(text: str) -> list[str]:
        return [x.strip() for x in text.split(",") if x.strip()]

    files = init_certs(args.dir, ids(args.nodes), ids(args.clients), ids(args.hosts), args.days)
    for f in files:
        print(f)
    print("keep ca.key away from the nodes; each node needs ca.pem and its own <id>.pem and <id>.key")
    return 0
