"""What the cluster holds, per group: asked of every node with one STATUS (all groups) each, in parallel.

Used by planners (batch partitions, stream offsets): which groups exist, each replica's first index and
commit index, and who leads. Nodes that do not answer are left out; no answer at all is an error.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..client import AsyncClient
from ..errors import LeaderUnavailableError, ResponseCode
from .options import SourceOptions


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
        """The next index after the highest commit index reported (committed entries never change)."""
        return max(r.committed for r in self.replicas) + 1

    @property
    def leader(self) -> Replica | None:
        leaders = [r for r in self.replicas if r.leader]
        return max(leaders, key=lambda r: r.committed) if leaders else None

    def bounds(self) -> tuple[int, int]:
        return self.earliest, self.latest


async def _view(opts: SourceOptions) -> dict[str, GroupView]:
    client = AsyncClient(opts.endpoints, **opts.auth.client_kwargs(),
                         request_timeout=opts.request_timeout)
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
    return asyncio.run(_view(opts))


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
