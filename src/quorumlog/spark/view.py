"""What the cluster holds, per group: asked of every node with one STATUS (all groups) each, in parallel;
and where each group ends, asked of the group itself with a linearizable END.

The STATUS view serves planners (batch partitions, stream offsets): which groups exist, each replica's first
index and commit index, and who leads. Nodes that do not answer are left out; no answer at all is an error.

A "latest" offset is not taken from it: the highest commit index the answering replicas report is stale
when the current leader did not answer (or a deposed one did). `cluster_ends` asks each group's end instead
(`AsyncClient.end`, consistency "linearizable": never below an entry acknowledged before the call), all
groups at once, and takes committed + 1. A primary/backup group without a controller refuses a linearizable
END (UNSUPPORTED): its latest falls back to the STATUS view's (`GroupView.latest`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..client import AsyncClient
from ..errors import LeaderUnavailableError, QuorumLogError, ResponseCode
from .options import SourceOptions

log = logging.getLogger("quorumlog.spark")


@dataclass(frozen=True, slots=True)
class Replica:
    node_id: str
    address: str
    begin: int  # first index held (earlier ones expired)
    committed: int  # commit index as this node knows it
    leader: bool


@dataclass(frozen=True, slots=True)
class GroupView:
    name: str
    replicas: tuple[Replica, ...]

    @property
    def earliest(self) -> int:
        """The first index some answering replica still holds."""
        return min(r.begin for r in self.replicas)

    @property
    def latest(self) -> int:
        """The next index after the highest commit index reported (committed entries never change). Possibly
        behind the group's: latest offsets come from `cluster_ends`, which falls back to this only for a
        group that has no linearizable end (primary/backup without a controller)."""
        return max(r.committed for r in self.replicas) + 1

    @property
    def leader(self) -> Replica | None:
        leaders = [r for r in self.replicas if r.leader]
        return max(leaders, key=lambda r: r.committed) if leaders else None


async def _view(opts: SourceOptions, auth: Mapping[str, Any]) -> dict[str, GroupView]:
    client = AsyncClient(opts.endpoints, **auth, request_timeout=opts.request_timeout)
    try:
        asked: set[str] = set()
        found: dict[str, list[Replica]] = {}
        todo = list(client.endpoints)
        last: BaseException | None = None
        while todo:
            asked.update(todo)
            docs = await asyncio.gather(*(client.node_status(a, all_groups=True) for a in todo),
                                        return_exceptions=True)
            more: list[str] = []
            for addr, doc in zip(todo, docs, strict=True):
                if isinstance(doc, BaseException):
                    last = doc
                    continue
                for name, g in doc.get("groups", {}).items():
                    found.setdefault(name, []).append(Replica(str(g["node"]), addr, int(g["begin_index"]),
                                                              int(g["committed_index"]), g["role"] == "leader"))
                    for peer in g.get("peers", {}).values():
                        if peer not in asked and peer not in more:
                            more.append(peer)
            todo = more
        if not found:
            raise LeaderUnavailableError(f"no node of {opts.endpoints} answered STATUS (last error: {last})",
                                         ResponseCode.NETWORK_ERROR)
        return {name: GroupView(name, tuple(sorted(reps, key=lambda r: r.node_id)))
                for name, reps in sorted(found.items())}
    finally:
        await client.close()


def cluster_view(opts: SourceOptions) -> dict[str, GroupView]:
    """Every group the answering nodes host, in name order."""
    return asyncio.run(_view(opts, opts.auth.client_kwargs()))


# Groups whose latest came from STATUS (no linearizable end), told once per process.
_FELL_BACK: set[str] = set()


async def _end(opts: SourceOptions, auth: Mapping[str, Any], view: GroupView) -> int:
    """Group `view.name`'s next index after its linearizable committed index; the view's `latest` when the
    group refuses a linearizable END as UNSUPPORTED (primary/backup without a controller).

    A client of that group alone, whose endpoints are the replicas that answered STATUS (the leader first):
    a group need not live on every node, and the client's own-group logic finds the leader, follows a
    NOT_LEADER's hint and moves past a node that is gone, asking again through a failover for up to
    readTimeout."""
    leader = view.leader
    others = sorted((r for r in view.replicas if r is not leader), key=lambda r: (-r.committed, r.node_id))
    addrs = list(dict.fromkeys(r.address for r in ([leader] if leader is not None else []) + others))
    client = AsyncClient(addrs, view.name, **auth, request_timeout=opts.request_timeout,
                         retry_timeout=opts.read_timeout)
    try:
        info = await client.end(view.name, "linearizable")
    except QuorumLogError as e:
        if e.code != ResponseCode.UNSUPPORTED:
            raise
        if view.name not in _FELL_BACK:
            _FELL_BACK.add(view.name)
            log.warning("group %s has no linearizable end (%s): its latest offset is the highest commit index "
                        "its replicas report through STATUS, which may be behind", view.name, e)
        return view.latest
    finally:
        await client.close()
    return info.committed + 1


async def _ends(opts: SourceOptions, auth: Mapping[str, Any], view: Mapping[str, GroupView],
                groups: Sequence[str]) -> dict[str, int]:
    wanted = [g for g in groups if g in view]
    got = await asyncio.gather(*(_end(opts, auth, view[g]) for g in wanted), return_exceptions=True)
    out: dict[str, int] = {}
    for g, r in zip(wanted, got, strict=True):  # (every client is closed by now, whatever failed)
        if isinstance(r, BaseException):
            raise r
        out[g] = r
    return out


async def _view_and_ends(opts: SourceOptions) -> tuple[dict[str, GroupView], list[str], dict[str, int]]:
    auth = opts.auth.client_kwargs()  # (one TLS context for every client)
    view = await _view(opts, auth)
    groups = read_groups(opts, view)
    return view, groups, await _ends(opts, auth, view, groups)


def cluster_ends(opts: SourceOptions) -> tuple[dict[str, GroupView], list[str], dict[str, int]]:
    """The STATUS view, the groups to read (`read_groups`), and each of those groups' latest offset: the
    next index after its linearizable committed index (`_end`), every group asked at once."""
    return asyncio.run(_view_and_ends(opts))


def read_groups(opts: SourceOptions, view: dict[str, GroupView]) -> list[str]:
    """The groups to read: the `groups` option (each must exist), else every group, in name order."""
    from .options import OptionError

    if opts.groups is None:
        return list(view)
    missing = [g for g in opts.groups if g not in view]
    if missing:
        raise OptionError("groups", f"group(s) {', '.join(map(repr, missing))} not found in the cluster "
                                    f"(it has {', '.join(view) or 'none'})")
    return list(opts.groups)
