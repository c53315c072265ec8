"""`quorumlog members list | add | promote | remove | set-address | force-recover`: a Raft group's membership
from a shell.

Each change is one CONFIG entry, answered once committed (client/members.py). force-recover is offline:
it writes a configuration straight into a stopped node's store, for a group that lost its quorum for good.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from ..errors import QuorumLogError, ResponseCode, StoreLockedError
from .client_cmds import _client, add_connection_args

# Without --timeout: how long a change is asked for (a leader change midway), and how long an add or a
# promotion waits for the new member to catch up (a whole log to copy takes a while).
CHANGE_TIMEOUT_S = 15.0
CATCH_UP_TIMEOUT_S = 60.0

FORCE_RECOVER_WARNING = """\
quorumlog: members force-recover is unsafe, so it needs --yes. It makes this node's log the group's:
  - entries the lost members held and this node lacks are gone, acknowledged ones included;
  - entries this node holds past its commit index become committed, though perhaps never acknowledged;
  - every member left out of --keep must be gone for good: one that comes back with its old log may
    elect a second leader of the old configuration, and the group then holds two histories.
Run it on one stopped node only, the one whose log is furthest ahead (quorumlog check-store
DIR/GROUP/ID: the highest end_term, then end_index); start it, and the other members --keep names with
their stores as they are; add the rest back afterwards (quorumlog members add), their stores emptied."""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    members = sub.add_parser("members", help="list or change the members of a Raft group",
                             description="List a Raft group's members, or change them one at a time: each change "
                                         "is a CONFIG entry, answered once committed.")
    msub = members.add_subparsers(dest="members_command", required=True, metavar="ACTION")

    p = msub.add_parser("list", help="each member's address, role and lag",
                        description="Each member of the group as its leader sees it: id, address, role (voter or "
                                    "learner, and which leads), the last index it holds (match) and how far "
                                    "behind the leader's log it is (lag).")
    add_connection_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_list)

    p = msub.add_parser("add", help="add a member (a learner, promoted once caught up)",
                        description="Add node --id, reached at --address, as a learner; unless --learner, promote "
                                    "it to voter once it has caught up. The node must run with join = true in "
                                    "its [[group]] table. --timeout bounds the whole wait (default "
                                    f"{CATCH_UP_TIMEOUT_S:.0f} s).")
    _change_args(p, address=True)
    p.add_argument("--learner", action="store_true", help="leave it a learner (it votes for nothing)")
    p.set_defaults(func=_add, timeout=None)

    p = msub.add_parser("promote", help="make a learner a voter, once caught up",
                        description="Make learner --id a voter once it is within the group's "
                                    "learner_promote_lag of the leader; --timeout bounds the wait (default "
                                    f"{CATCH_UP_TIMEOUT_S:.0f} s).")
    _change_args(p)
    p.set_defaults(func=_promote, timeout=None)

    p = msub.add_parser("remove", help="remove a member (the leader too)",
                        description="Remove voter or learner --id. A removed leader hands over once the change "
                                    "commits. Stop the node afterwards.")
    _change_args(p)
    p.set_defaults(func=_remove)

    p = msub.add_parser("set-address", help="reach a member at a new address",
                        description="From now on the members reach --id at --address (it keeps its id and data). "
                                    "Start the node listening there.")
    _change_args(p, address=True)
    p.set_defaults(func=_set_address)

    p = msub.add_parser("force-recover", help="offline: make a stopped node's log the group's (lost quorum)",
                        description="For a group that lost its quorum for good: on a stopped node, append a "
                                    "CONFIG entry whose voters are --keep to its log, in a term above every term "
                                    "it has seen. Started again, the node follows that configuration (with "
                                    "--keep naming itself alone, it elects itself). Unsafe: see --yes.")
    p.add_argument("--group", required=True, help="the group")
    p.add_argument("--keep", required=True, metavar="IDS", help="the voters from now on, comma-separated; must "
                                                                "name this node")
    p.add_argument("--data-dir", metavar="DIR",
                   help="the node's data directory (stores in DIR/<group>/<id>); default: the data_dir of --config")
    p.add_argument("--id", dest="node_id", metavar="ID",
                   help="this node's id (default: the only store of the group under DIR, or the id of --config)")
    p.add_argument("--config", metavar="FILE", help="the node's TOML file: its data_dir, id and [store] settings")
    p.add_argument("--yes", action="store_true", help="do it, although acknowledged entries may be lost")
    p.set_defaults(func=_force_recover)


def _change_args(p: argparse.ArgumentParser, *, address: bool = False) -> None:
    add_connection_args(p)
    p.add_argument("--id", dest="node_id", metavar="ID", required=True, help="the member's node id")
    if address:
        p.add_argument("--address", required=True, metavar="HOST:PORT", help="where the members reach it")
    p.add_argument("--json", action="store_true", help="print the resulting configuration as JSON")


# -- online changes --------------------------------------------------------------------------------------
def _members_doc(m: Any) -> dict[str, Any]:
    return {"voters": list(m.voters), "learners": list(m.learners), "addresses": dict(m.addresses),
            "index": m.index if m.index >= 0 else None}


def _report(args: argparse.Namespace, what: str, m: Any) -> int:
    if args.json:
        print(json.dumps(_members_doc(m)))
        return 0
    # index -1: an earlier try of this change had committed, and the client read the configuration back.
    entry = f"CONFIG entry {m.index}" if m.index >= 0 else "in force already"
    print(f"group {args.group}: {what}")
    print(f"configuration ({entry}): voters {', '.join(m.voters)}; learners {', '.join(m.learners) or 'none'}")
    return 0


def _with_timeout(args: argparse.Namespace) -> tuple[argparse.Namespace, float]:
    """The namespace the client is built from (its retry timeout), and how long an add or a promotion waits
    for the learner to catch up."""
    given = args.timeout
    return (argparse.Namespace(**{**vars(args), "timeout": CHANGE_TIMEOUT_S if given is None else given}),
            CATCH_UP_TIMEOUT_S if given is None else given)


def _refused(args: argparse.Namespace, why: str, m: Any) -> QuorumLogError:
    return QuorumLogError(f"{args.node_id} {why} of group {args.group} (voters {', '.join(m.voters)}; learners "
                          f"{', '.join(m.learners) or 'none'})")


def _add(args: argparse.Namespace) -> int:
    client_args, wait = _with_timeout(args)
    with _client(client_args) as c:
        # The client counts a change that finds the configuration already so as done (a retry of one that
        # committed): a member at another address, or a voter added again, would pass unnoticed.
        now = c.members()
        if args.node_id in now.voters:
            raise _refused(args, "is a voter already", now)
        known = now.addresses.get(args.node_id)
        if args.node_id in now.learners and known and known != args.address:
            raise QuorumLogError(f"{args.node_id} is a learner of group {args.group} at {known}, not "
                                 f"{args.address}: quorumlog members set-address moves it")
        with _catching_up(args):
            m = c.add_member(args.node_id, args.address, learner=args.learner, timeout=wait)
    role = "a learner" if args.learner else "a voter"
    return _report(args, f"{args.node_id} added at {args.address} as {role}", m)


def _promote(args: argparse.Namespace) -> int:
    client_args, wait = _with_timeout(args)
    with _client(client_args) as c, _catching_up(args):
        m = c.promote_member(args.node_id, timeout=wait)
    return _report(args, f"{args.node_id} promoted to voter", m)


@contextlib.contextmanager
def _catching_up(args: argparse.Namespace) -> Iterator[None]:
    """A learner that did not catch up in time: the leader's reason, and what to look at."""
    try:
        yield
    except QuorumLogError as e:
        if e.code != ResponseCode.FALL_BEHIND_TOO_MUCH:
            raise
        raise QuorumLogError(
            f"{e}; is {args.node_id} running, reachable at its address, with join = true in its [[group]] "
            f"table? It stays a learner; once it has caught up: "
            f"quorumlog members promote --group {args.group} --id {args.node_id}", e.code) from None


def _remove(args: argparse.Namespace) -> int:
    with _client(args) as c:
        now = c.members()  # (the client would count removing a non-member as done: see _add)
        if args.node_id not in now.voters and args.node_id not in now.learners:
            raise _refused(args, "is not a member", now)
        m = c.remove_member(args.node_id)
    return _report(args, f"{args.node_id} removed", m)


def _set_address(args: argparse.Namespace) -> int:
    with _client(args) as c:
        m = c.set_member_address(args.node_id, args.address)
    return _report(args, f"{args.node_id} is reached at {args.address}", m)


def _leader_doc(c: Any, group: str, timeout: float) -> dict[str, Any]:
    """The group's status document from its leader: only the leader knows each member's match index."""
    deadline = time.monotonic() + timeout
    while True:
        md = c.metadata(with_nodes=False)
        addr = md.peers.get(md.leader) if md.leader else None
        if addr:
            try:
                doc = c.node_status(addr)["groups"][group]
            except (QuorumLogError, OSError, KeyError):
                doc = None
            if doc is not None and doc.get("role") == "leader":
                return dict(doc)
        if time.monotonic() >= deadline:
            raise QuorumLogError(f"group {group}: no leader answered within {timeout:g} s")
        time.sleep(0.1)


def member_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per member from the leader's status document: id, address, role, leader, match, lag."""
    cfg = doc.get("config")
    peers = dict(doc.get("peers", {}))
    backups = cfg is None  # a primary/backup group: its members (its controller group's), all backups but one
    if cfg is None:
        cfg = {"voters": list(doc.get("members") or sorted(peers)), "learners": [], "addresses": {}}
    watermarks = doc.get("peer_watermarks", {})
    lags = doc.get("peer_lag", {})
    leader = doc["node"]
    rows = []
    for node in sorted({*cfg["voters"], *cfg["learners"]}):
        mine = node == leader
        rows.append({
            "id": node,
            "address": cfg["addresses"].get(node) or peers.get(node),
            "role": ("primary" if mine else "backup") if backups else "voter" if node in cfg["voters"] else "learner",
            "leader": mine,
            "match_index": doc["end_index"] if mine else watermarks.get(node),
            "lag": 0 if mine else lags.get(node),
        })
    return rows


def _list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        doc = _leader_doc(c, args.group, args.timeout)
    rows = member_rows(doc)
    if args.json:
        print(json.dumps({"group": args.group, "leader": doc["node"], "term": doc["term"],
                          "end_index": doc["end_index"], "committed_index": doc["committed_index"],
                          "change_pending": bool(doc.get("change_pending")), "members": rows}, indent=2))
        return 0
    from rich.table import Table

    from ..progress import table_console

    pending = ", a change pending" if doc.get("change_pending") else ""
    table = Table(title=f"group {args.group}: leader {doc['node']}, term {doc['term']}, "
                        f"end {doc['end_index']}, committed {doc['committed_index']}{pending}")
    for col in ("member", "address", "role", "match", "lag"):
        table.add_column(col, justify="right" if col in ("match", "lag") else "left", no_wrap=True)
    for r in rows:
        role = f"[bold green]{r['role']}, leader[/bold green]" if r["leader"] and r["role"] != "primary" else \
            f"[bold green]{r['role']}[/bold green]" if r["leader"] else r["role"]
        table.add_row(r["id"], r["address"] or "-", role, _number(r["match_index"]), _number(r["lag"]))
    table_console().print(table)
    return 0


def _number(n: int | None) -> str:
    return "-" if n is None else str(n)


# -- force-recover ---------------------------------------------------------------------------------------
def _segment_size(directory: str) -> int | None:
    """The size of the first segment file in `directory` (every segment of a list has the same size)."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.isdigit())
    except OSError:
        return None
    return os.path.getsize(os.path.join(directory, names[0])) if names else None


def _find_store(args: argparse.Namespace) -> tuple[str, str, Any]:
    """(store directory, node id, the store settings to open it with)."""
    from ..config import MAX_BODY_BYTES, StoreConfig, load_node_config
    from ..store.file_store import store_dir

    data_dir, node_id, base = args.data_dir, args.node_id, None
    if args.config:
        node_cfg = load_node_config(args.config, args.node_id)
        group = next((g for g in node_cfg.groups if g.name == args.group), None)
        if group is None:
            raise QuorumLogError(f"{args.config} hosts no group {args.group}")
        if group.ha.primary_backup:
            raise QuorumLogError(f"group {args.group} is a primary/backup group: promote a backup instead "
                                 f"(quorumlog promote --group {args.group} --to ID --force)")
        data_dir, node_id, base = data_dir or str(node_cfg.data_dir), node_id or node_cfg.node_id, group.store
    if not data_dir:
        raise QuorumLogError("name the node's data directory: --data-dir DIR (or --config node.toml)")
    group_dir = os.path.join(data_dir, args.group)
    if not node_id:
        try:
            found = sorted(n for n in os.listdir(group_dir) if os.path.isdir(os.path.join(group_dir, n)))
        except OSError as e:
            raise QuorumLogError(f"no store of group {args.group} under {data_dir}: {e.strerror}") from None
        if len(found) != 1:
            raise QuorumLogError(f"{group_dir} holds {len(found)} stores ({', '.join(found) or 'none'}): "
                                 "name the node with --id")
        node_id = found[0]
    path = store_dir(data_dir, args.group, node_id)
    # FileStore makes a missing store: here that would be a new, empty log, not this node's.
    if not os.path.isdir(os.path.join(path, "data")):
        raise QuorumLogError(f"{path} is no store (no data/ directory): check --data-dir, --group and --id")
    # The files' sizes rule: a store opened with other segment sizes than it was written with fails, or
    # worse, is extended to them.
    data_seg = _segment_size(os.path.join(path, "data"))
    index_seg = _segment_size(os.path.join(path, "index"))
    if data_seg is None and base is None:
        raise QuorumLogError(f"{path} holds no data segment to learn its segment size from: pass the node's "
                             "--config")
    base = base or StoreConfig()
    data_seg = data_seg or base.data_segment_bytes
    cfg = StoreConfig(data_segment_bytes=data_seg, index_segment_bytes=index_seg or base.index_segment_bytes,
                      flush="sync", max_body_bytes=min(MAX_BODY_BYTES, data_seg - 84),
                      # One small entry: a nearly full disk is no reason to refuse it.
                      disk_clean_ratio=1.0, disk_full_ratio=1.0)
    return path, node_id, cfg


def _force_recover(args: argparse.Namespace) -> int:
    from ..entry import MAGIC_CONFIG
    from ..raft.membership import Membership
    from ..store.file_store import FileStore

    keep = [k.strip() for k in args.keep.split(",") if k.strip()]
    path, node_id, cfg = _find_store(args)
    if node_id not in keep:
        raise QuorumLogError(f"--keep {','.join(keep)} does not name this node ({node_id}): the node recovered "
                             "must be one of the voters kept")
    Membership.of(keep)  # a valid configuration (ids), checked before anything opens
    if not args.yes:
        print(FORCE_RECOVER_WARNING, file=sys.stderr)
        print(f"quorumlog: error: refusing without --yes (store {path})", file=sys.stderr)
        return 2
    try:
        store = FileStore(path, cfg)
    except StoreLockedError as e:
        raise QuorumLogError(f"{e}: the node is running; stop it first (force-recover rewrites a stopped "
                             "node's store)") from None
    try:
        term, _vote = store.load_vote()
        configs = store.configs
        last = Membership.decode(configs[-1][2]) if configs else None
        addresses = {k: a for k in keep if last is not None and (a := last.address(k))}
        config = Membership.of(keep, (), addresses)
        notes = []
        # Left as they are, a loss recorded here would keep the node from voting or leading until another
        # member, which will not come back, supplied what it lost: that loss is accepted now.
        if store.damage is not None:
            d = store.damage
            lost_from = max(d.first_bad_index, store.end_index + 1)
            notes.append(f"entries {lost_from}..{d.committed_index}, lost here before ({d.reason}), stay lost")
            store.clear_damage()
        if store.tail_cut is not None:
            notes.append(f"entries from {store.tail_cut} that a recovery cut stay lost")
            store.clear_tail_cut()
        if store.recovering:
            store.set_recovering(False)
        new_term = max(store.end_term, term) + 1
        # The term first: a crash in between must not leave an entry of a term the node has not entered
        # (it could then still vote in that term).
        store.save_vote(new_term, None)
        appended = store.append([config.encode(store.identity or None)], new_term, MAGIC_CONFIG)
        store.flush()
        store.checkpoint()
        begin, committed = store.begin_index, store.committed_index
        last_kept = appended.first_index - 1
    finally:
        store.close()
    print(f"group {args.group}, node {node_id}: configuration forced at index {appended.first_index} "
          f"(term {new_term}): voters {', '.join(sorted(keep))}")
    print(f"kept entries {begin}..{last_kept}: last index {last_kept}, commit index {committed}")
    if last_kept > committed:
        which = f"entry {last_kept} was" if last_kept == committed + 1 else f"entries {committed + 1}..{last_kept} were"
        print(f"{which} not known committed here: committed once the node leads, though perhaps never "
              "acknowledged")
    print(f"entries after {committed} that only the lost members held, acknowledged or not, are lost")
    for note in notes:
        print(note)
    others = [k for k in keep if k != node_id]
    if others:  # (their logs no further ahead than this one: they vote for it, and it brings them the entry)
        print(f"start the node, and {', '.join(others)} with their stores as they are: they follow this "
              "configuration")
    else:
        print("start the node: it follows this configuration and elects itself")
    return 0
