"""`quorumlog append | read | tail | end | status | transfer-leader | promote`: the client operations from a
shell."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ..argtypes import non_negative, positive, seconds
from ..entry import Entry

DEFAULT_ENDPOINTS = "127.0.0.1:9000,127.0.0.1:9001,127.0.0.1:9002"


def add_secret_arg(p: argparse.ArgumentParser) -> None:
    """--secret-file: the shared secret is read from a file or $QUORUMLOG_SECRET, never from the command
    line, where any user of the machine sees it in `ps`."""
    p.add_argument("--secret-file", help="file holding the shared secret (default: $QUORUMLOG_SECRET_FILE, else "
                                         "the secret in $QUORUMLOG_SECRET, if set)")


def read_secret(args: argparse.Namespace) -> str | None:
    """The secret from --secret-file, else the file $QUORUMLOG_SECRET_FILE names, else $QUORUMLOG_SECRET,
    else None (ConfigError if a named file is unreadable)."""
    from ..config import read_secret_file

    path = args.secret_file or os.environ.get("QUORUMLOG_SECRET_FILE")
    if path:
        return read_secret_file(path)
    return os.environ.get("QUORUMLOG_SECRET") or None


def tls_context(args: argparse.Namespace) -> Any:
    """The client's SSL context from --tls-ca/--tls-cert/--tls-key, or None."""
    if not args.tls_ca:
        return None
    from ..tls import client_context

    return client_context(args.tls_ca, args.tls_cert, args.tls_key)


def add_connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoints", default=os.environ.get("QUORUMLOG_ENDPOINTS", DEFAULT_ENDPOINTS),
                   help="host:port,... of any nodes (default $QUORUMLOG_ENDPOINTS or 127.0.0.1:9000-9002)")
    p.add_argument("--group", default="g0", help="group name (default g0)")
    p.add_argument("--cluster", default="quorumlog", help="cluster name (default quorumlog)")
    add_secret_arg(p)
    p.add_argument("--token", help="connect with this named token (its secret from --secret-file or "
                                   "$QUORUMLOG_SECRET) and its permissions")
    p.add_argument("--tls-ca", help="nodes with mutual TLS: the CA certificate (with --tls-cert and --tls-key)")
    p.add_argument("--tls-cert", help="this client's certificate (quorumlog certs init)")
    p.add_argument("--tls-key", help="this client's key")
    p.add_argument("--timeout", type=seconds, default=15.0, help="seconds to keep retrying across a leader change")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("append", help="append entries (arguments, or stdin lines)", description=(
        "Append each argument as one entry, or each line of stdin when there are no arguments (or '-'). "
        "Prints index, term and position of each. Retries are idempotent: an append is written once even "
        "when the leader changes under it."))
    add_connection_args(p)
    p.add_argument("bodies", nargs="*", help="entry bodies (UTF-8); none or '-' reads stdin lines")
    p.add_argument("--expected-end", type=int, default=None,
                   help="write only if the group's last client entry is this index (-1: none); the first "
                        "request only, later ones follow it")
    p.add_argument("--batch", type=positive, default=1000, help="stdin lines per request (default 1000)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only a summary")
    p.set_defaults(func=_append)

    p = sub.add_parser("read", help="read committed entries", description="Print committed entries from an index.")
    add_connection_args(p)
    p.add_argument("--from", dest="start", type=non_negative, default=0, help="first index (default 0)")
    p.add_argument("--count", type=non_negative, default=100, help="how many indexes (default 100)")
    p.add_argument("--format", choices=("raw", "hex", "json"), default="raw",
                   help="raw: bodies, one per line; hex: index term hex; json: one object per line")
    p.add_argument("--include-control", action="store_true", help="also NOOP and CONFIG entries")
    p.set_defaults(func=_read)

    p = sub.add_parser("tail", help="print the last entries, or follow new ones (-f)",
                       description="Print the last --lines committed entries; with -f keep printing new ones.")
    add_connection_args(p)
    p.add_argument("-f", "--follow", action="store_true", help="wait for and print new entries until Ctrl-C")
    p.add_argument("-n", "--lines", type=non_negative, default=10,
                   help="how many of the last entries first (default 10)")
    p.add_argument("--from", dest="start", type=non_negative, help="start at this index instead")
    p.add_argument("--format", choices=("raw", "hex", "json"), default="raw")
    p.set_defaults(func=_tail)

    p = sub.add_parser("end", help="a group's end, committed index and term (linearizable, or --local)",
                       description="Print the group's end (last index), committed index and term (a primary/backup "
                                   "group's epoch) as three integers: linearizable by default (never behind an "
                                   "append acknowledged before the command started; any member of a Raft group "
                                   "answers, only the primary of a primary/backup group with a controller), or "
                                   "--local: the answering node's own view, which may be behind.")
    add_connection_args(p)
    p.add_argument("--local", action="store_true", help="the node's own view, at once (may be behind the group's)")
    p.add_argument("--node", help="ask this node (its id, or host:port)")
    p.add_argument("--json", action="store_true", help="print a JSON object: end, committed, term, node")
    p.set_defaults(func=_end)

    p = sub.add_parser("status", help="every node's role, term and indexes",
                       description="Ask every endpoint for its status; print a table (or --json).")
    add_connection_args(p)
    p.add_argument("--json", action="store_true", help="print the nodes' status documents as JSON")
    p.set_defaults(func=_status)

    p = sub.add_parser("transfer-leader", help="hand a group's leadership to a node",
                       description="Ask the leader to hand over to --to once it is caught up.")
    add_connection_args(p)
    p.add_argument("--to", required=True, help="target node id")
    p.set_defaults(func=_transfer)

    p = sub.add_parser("promote", help="make a backup the primary of a primary/backup group",
                       description="RocketMQ's manual switch: a new epoch begins with --to as its primary. The old "
                                   "primary, if it returns, is fenced and cut back to where the new one agrees. "
                                   "Refuses a target behind another reachable member (a backup's log, or what "
                                   "a live primary acknowledged) unless --force, naming the member ahead.")
    add_connection_args(p)
    p.add_argument("--to", required=True, help="the backup's node id")
    p.add_argument("--force", action="store_true",
                   help="promote even a backup behind the primary or another backup (loses what it lacks)")
    p.set_defaults(func=_promote)


@contextlib.contextmanager
def _client(args: argparse.Namespace) -> Iterator[Any]:
    """The command's client; on a terminal, while it retries, a line after a moment saying what for."""
    from ..client import Client

    with Client(args.endpoints, group=args.group, cluster=args.cluster, secret=read_secret(args),
                token=args.token, tls=tls_context(args), retry_timeout=args.timeout) as c:
        if not sys.stderr.isatty():
            yield c
            return
        stop = threading.Event()
        watcher = threading.Thread(target=_say_what_stalls, args=(c.aio, stop), daemon=True)
        watcher.start()
        try:
            yield c
        finally:
            stop.set()
            watcher.join(1.0)


STALL_HINT_AFTER_S = 1.5


def _say_what_stalls(client: Any, stop: threading.Event) -> None:
    """Once a call has retried for STALL_HINT_AFTER_S, say on stderr what it waits for, once per reason: a
    wrong endpoint would otherwise be silence until --timeout runs out."""
    said: set[str] = set()
    while not stop.wait(0.1):
        stalled = client.stalled  # (a tuple, replaced whole by the client's thread)
        if stalled is None:
            continue
        what, since, until = stalled
        now = time.monotonic()
        if what not in said and now - since >= STALL_HINT_AFTER_S and until > now:
            said.add(what)
            print(f"quorumlog: {what}; retrying for {until - now:.0f} s more", file=sys.stderr, flush=True)


def _stdin_batches(size: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for line in sys.stdin.buffer:
        batch.append(line.rstrip(b"\r\n"))
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _append(args: argparse.Namespace) -> int:
    if args.bodies and args.bodies != ["-"]:
        batches: Iterable[list[bytes]] = [[b.encode() for b in args.bodies]]
    else:
        batches = _stdin_batches(max(1, args.batch))
    total = 0
    first = last = None
    expected = args.expected_end
    with _client(args) as c:
        for batch in batches:
            results = c.append_many(batch, expected_end=expected)
            if expected is not None:
                expected = results[-1].index  # the next request continues right after this one
            total += len(results)
            if first is None:
                first = results[0].index
            last = results[-1].index
            if not args.quiet:
                for r in results:
                    print(f"{r.index}\t{r.term}\t{r.pos}")
    if args.quiet:
        print(f"appended {total} entries" + (f", indexes {first}..{last}" if total else ""))
    return 0


def _print_entry(e: Entry, fmt: str) -> None:
    if fmt == "raw":
        sys.stdout.buffer.write(bytes(e.body) + b"\n")
    elif fmt == "hex":
        sys.stdout.write(f"{e.index}\t{e.term}\t{bytes(e.body).hex()}\n")
    else:
        doc: dict[str, Any] = {"index": e.index, "term": e.term, "pos": e.pos}
        try:
            doc["body"] = bytes(e.body).decode()
        except UnicodeDecodeError:
            doc["body_base64"] = base64.b64encode(e.body).decode()
        if e.magic != 1:
            doc["magic"] = e.magic
        sys.stdout.write(json.dumps(doc) + "\n")


def _read(args: argparse.Namespace) -> int:
    with _client(args) as c:
        printed = 0
        for e in c.read(args.start, args.count, include_control=args.include_control):
            _print_entry(e, args.format)
            printed += 1
        sys.stdout.flush()
        if not printed and args.count:
            # Nothing to print: say why when it is that nothing is committed there yet (not an error).
            _entries, _next, committed = c.read_batch(args.start, 1)
            if args.start > committed:
                print(f"quorumlog: nothing is committed at index {args.start} of group {args.group} yet: its "
                      f"commit index is {committed}", file=sys.stderr)
    return 0


def _tail(args: argparse.Namespace) -> int:
    with _client(args) as c:
        md = c.metadata(with_nodes=True)
        committed = max((n["committed_index"] for n in md.nodes.values() if n), default=-1)
        start = args.start if args.start is not None else max(0, committed + 1 - max(0, args.lines))
        if not args.follow:
            for e in c.read(start, max(0, committed - start + 1)):
                _print_entry(e, args.format)
            return 0
        try:
            for e in c.tail(start):
                _print_entry(e, args.format)
                sys.stdout.flush()
        except KeyboardInterrupt:
            return 0
    return 0


def _end(args: argparse.Namespace) -> int:
    with _client(args) as c:
        info = c.end(args.group, "local" if args.local else "linearizable", node=args.node)
    if args.json:
        print(json.dumps({"end": info.end, "committed": info.committed, "term": info.term, "node": info.node}))
    else:
        print(f"{info.end} {info.committed} {info.term}")
    return 0


def _status(args: argparse.Namespace) -> int:
    from ..client import parse_endpoints
    from ..net.errors import HandshakeError, NotANodeError

    docs: dict[str, Any] = {}
    with _client(args) as c:
        for addr in parse_endpoints(args.endpoints):
            try:
                docs[addr] = c.node_status(addr, all_groups=True)
            except HandshakeError as e:  # up, but it refused us (or it is no node): not "down"
                docs[addr] = {"error": str(e), "refused": "not a node" if isinstance(e, NotANodeError) else "refused"}
            except Exception as e:  # a down node is part of the picture, not a failure of the command
                docs[addr] = {"error": str(e)}
    if args.json:
        print(json.dumps(docs, indent=2))
        return 0 if any("error" not in d for d in docs.values()) else 1
    from rich.table import Table

    from ..progress import table_console

    table = Table(title="quorumlog status")
    for col in ("endpoint", "node", "group", "role", "term", "leader", "begin", "end", "committed", "producers",
                "lag"):
        table.add_column(col, justify="right" if col in ("term", "begin", "end", "committed", "producers")
                         else "left", no_wrap=col != "lag")
    for addr, d in docs.items():
        if "error" in d:
            if "refused" in d:  # the whole reason: what to fix
                table.add_row(addr, "-", "-", f"[red]{d['refused']}[/red]", "", "", "", "", "", "", d["error"])
            else:
                table.add_row(addr, "-", "-", "[red]down[/red]", "", "", "", "", "", "", d["error"][:60])
            continue
        for name, g in sorted(d["groups"].items()):
            role = g["role"]
            style = {"leader": "[bold green]", "candidate": "[yellow]"}.get(role, "")
            lag = ", ".join(f"{p}:{n}" for p, n in g.get("peer_lag", {}).items())
            if g.get("replication") == "primary-backup":  # term is the epoch; the lag of each backup
                role = ("primary" if g.get("confirmed") else "primary?") if role == "leader" else "backup"
                in_sync = g.get("in_sync")
                if in_sync is not None:
                    lag += f" (in sync: {', '.join(in_sync) or 'none'})"
            table.add_row(addr, d["node"], name, f"{style}{role}", str(g["term"]), str(g["leader"] or "-"),
                          str(g["begin_index"]), str(g["end_index"]), str(g["committed_index"]),
                          str(g.get("producers", "-")), lag)
    table_console().print(table)
    return 0 if any("error" not in d for d in docs.values()) else 1


def _promote(args: argparse.Namespace) -> int:
    with _client(args) as c:
        primary, epoch = c.promote(args.to, force=args.force)
    print(f"group {args.group}: {primary} is the primary of epoch {epoch}")
    return 0


def _transfer(args: argparse.Namespace) -> int:
    with _client(args) as c:
        leader = c.transfer_leader(args.to)
    print(f"group {args.group}: leader is now {leader}")
    return 0
