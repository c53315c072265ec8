"""What RaftNode's mixins (transitions.py, rejoin.py, reconfig.py, quiesce.py) use of the node, declared
once for the type checker: each mixin's own needs beyond these it declares itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections import Counter

    from ..config import RaftConfig
    from ..core.producers import ProducerTable
    from ..core.ready import Ready
    from ..core.role import Role
    from ..store.base import LogStore
    from .elector import Elector
    from .handler import EntryHandler
    from .member import MemberState
    from .pusher import Leader
    from .roles import Outcome


class NodeParts:
    """The node's state and plumbing every mixin of RaftNode may use (RaftNode defines them)."""

    if TYPE_CHECKING:
        member: MemberState
        store: LogStore
        config: RaftConfig
        stats: Counter[str]
        elector: Elector
        handler: EntryHandler
        producers: ProducerTable
        leader: Leader | None

        def _begin(self, now: int | None = None) -> tuple[Ready, tuple[Role, int, str | None]]: ...
        def _finish(self, out: Ready, before: tuple[Role, int, str | None]) -> Ready: ...
        def _run(self, outcome: Outcome | None, now: int, out: Ready) -> None: ...
