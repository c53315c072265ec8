"""MemberState: who this node is in its group, its role, term, vote and the leader it follows."""

from __future__ import annotations

from ..store.base import LogStore
from .messages import Role

# Prefixed to the vote slot while the node recovers lost committed entries, so the state survives a
# restart even after the store's own Damage report has cleared (it clears once the end index is back,
# which is not yet enough). The vote cast in the current term, if any, follows the prefix.
RECOVERING_MARK = "\x00recovering:"


def _encode_vote(voted_for: str | None, recovering: bool) -> str | None:
    return RECOVERING_MARK + (voted_for or "") if recovering else voted_for


class MemberState:
    """Role, term and vote of one node in one group. Term and vote changes are persisted through the
    store (`save_vote`, durable when it returns) before anything that depends on them is sent."""

    __slots__ = ("node_id", "group", "members", "others", "other_set", "majority", "role", "term",
                 "voted_for", "leader_id", "recovering", "_store")

    def __init__(self, node_id: str, group: str, peers: list[str], store: LogStore) -> None:
        # Sorted: iteration order must not depend on string hashing, or replays would differ.
        members = sorted(set(peers) | {node_id})
        self.node_id = node_id
        self.group = group
        self.members: list[str] = members
        self.others: list[str] = [m for m in members if m != node_id]
        self.other_set = frozenset(self.others)  # membership tests only; iterate `others`
        self.majority = len(members) // 2 + 1
        self._store = store
        term, voted_for = store.load_vote()
        self.recovering = voted_for is not None and voted_for.startswith(RECOVERING_MARK)
        if self.recovering:
            assert voted_for is not None
            voted_for = voted_for[len(RECOVERING_MARK):] or None
        self.term: int = term
        self.voted_for: str | None = voted_for
        self.role = Role.FOLLOWER
        self.leader_id: str | None = None

    def is_member(self, node: str) -> bool:
        return node in self.other_set

    def set_term(self, term: int, voted_for: str | None) -> None:
        """Move to a term (and vote), durably. Terms never go back."""
        if term < self.term:
            raise ValueError(f"term {term} below current {self.term}")
        if term == self.term and voted_for == self.voted_for:
            return
        if self.recovering and voted_for is not None and voted_for != self.voted_for:
            raise ValueError("a recovering node casts no vote")
        self._store.save_vote(term, _encode_vote(voted_for, self.recovering))
        self.term = term
        self.voted_for = voted_for

    def set_recovering(self, recovering: bool) -> None:
        """Enter or leave protocol-aware recovery, durably (see RECOVERING_MARK)."""
        if recovering == self.recovering:
            return
        self.recovering = recovering
        self._store.save_vote(self.term, _encode_vote(self.voted_for, recovering))

    def __repr__(self) -> str:
        return (f"MemberState({self.node_id} {self.role.name} t{self.term} vote={self.voted_for} "
                f"leader={self.leader_id})")
