"""MemberState: who this node is in its group, its role, term, vote and the leader it follows."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from ..core.role import Role
from ..errors import ConfigError
from ..store.base import LogStore
from .membership import Membership

# The vote recorded for a term in which this node must not vote (after a wiped store rejoins, or once it
# leaves recovery): no member id can be "*", so the term counts as voted.
ABSTAINED = "*"


def members_digest(group: str, members: Iterable[str]) -> str:
    """A short digest naming a group and its member ids; equal on every correctly configured node.

    The id of a group bootstrapped from its configured members (its group id): every founding member
    computes the same value without a message. Stores record it as their identity, CONFIG entries carry
    it, and peers compare it at HELLO, so two nodes configured with different member lists (and so
    different majorities) never talk Raft to each other. It never changes after, whatever the members
    become: a node that joins the group later takes it from a CONFIG entry (node.py)."""
    text = "\n".join([group, *sorted(set(members))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def checked_identity(store: LogStore, group: str, members: list[str]) -> str:
    """The id of a group bootstrapped from `members` (`members_digest`), refused if the store recorded
    another: every founding member must list the same members. A store written before identities existed
    records it now."""
    identity = members_digest(group, members)
    recorded = store.identity
    if recorded:
        if recorded != identity:
            raise ConfigError(f"the store of group {group} was made for another member list (identity "
                              f"{recorded}, configured members {members} give {identity}): "
                              "every node must list the same members")
    elif recorded is not None:
        store.set_identity(identity)
    return identity


def group_id_conflict(group: str, recorded: str, carried: str, where: str) -> ConfigError:
    """The error of a store that recorded one group id and holds (or was sent) a CONFIG entry carrying
    another: its log and a leader's are two different groups of the same name."""
    return ConfigError(f"the store of group {group} records group id {recorded}, but {where} carries group id "
                       f"{carried}: two different groups of the same name (a node configured for another "
                       "cluster's group, or a store copied from one). This store takes no part in that group; "
                       "move it aside (and start the node with join = true to join the group afresh)")


class MemberState:
    """Role, term and vote of one node in one group, and the configuration it follows. Term and vote
    changes are persisted through the store (`save_vote`, durable when it returns) before anything that
    depends on them is sent.

    The configuration is the one of the last CONFIG entry in the log (node.py applies it), else the
    configured member list: every member a voter, or, for a node that joins an existing group, the
    others voters and this node a learner until a CONFIG entry names it."""

    __slots__ = ("node_id", "group", "static_members", "bootstrap", "config", "members", "others",
                 "other_set", "voters", "voter_others", "is_voter", "majority", "role", "term", "voted_for",
                 "leader_id", "recovering", "_store")

    def __init__(self, node_id: str, group: str, peers: list[str], store: LogStore, joining: bool = False) -> None:
        # Sorted: iteration order must not depend on string hashing, or replays would differ.
        members = sorted(set(peers) | {node_id})
        self.node_id = node_id
        self.group = group
        self.static_members = members  # the configured list (of a founding member: the group id's)
        others = [m for m in members if m != node_id]
        self.bootstrap = Membership.of(others, [node_id]) if joining and others else Membership.of(members)
        self._store = store
        self.apply(self.bootstrap)
        term, voted_for = store.load_vote()
        # Persisted by the store beside term and vote, so a restart midway does not end recovery
        # (the store's own Damage report clears once the end index is back, which is not yet enough).
        self.recovering = store.recovering
        self.term: int = term
        self.voted_for: str | None = voted_for
        self.role = Role.FOLLOWER
        self.leader_id: str | None = None

    def apply(self, config: Membership) -> None:
        """Follow `config` from now on (it is the last one in the log)."""
        self.config = config
        self.members: list[str] = config.members
        self.others: list[str] = [m for m in self.members if m != self.node_id]
        self.other_set = frozenset(self.others)  # membership tests only; iterate `others`
        self.voters = config.voters
        self.voter_others: list[str] = [m for m in self.others if m in config.voters]
        self.is_voter = self.node_id in config.voters
        self.majority = config.majority

    def is_member(self, node: str) -> bool:
        return node in self.other_set

    def set_term(self, term: int, voted_for: str | None) -> None:
        """Move to a term (and vote), durably. Terms never go back."""
        if term < self.term:
            raise ValueError(f"term {term} below current {self.term}")
        if term == self.term and voted_for == self.voted_for:
            return
        if self.recovering and voted_for not in (None, ABSTAINED, self.voted_for):
            raise ValueError("a recovering node casts no vote")
        self._store.save_vote(term, voted_for)
        self.term = term
        self.voted_for = voted_for

    def set_recovering(self, recovering: bool) -> None:
        """Enter or leave protocol-aware recovery, durably."""
        if recovering == self.recovering:
            return
        self._store.set_recovering(recovering)
        self.recovering = recovering

    def __repr__(self) -> str:
        return (f"MemberState({self.node_id} {self.role.name} t{self.term} vote={self.voted_for} "
                f"leader={self.leader_id})")
