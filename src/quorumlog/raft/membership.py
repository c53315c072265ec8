"""A Raft group's configuration: its voters, its learners, and each member's address.

A change is a CONFIG entry holding the whole new configuration (`encode` / `decode`). Changes are
single-server: from one configuration to the next at most one voter is added or removed (a learner may be
added, promoted or removed and an address changed besides), so any majority of the old voters overlaps any
majority of the new and no joint consensus is needed (Raft dissertation §4.1). A configuration takes effect
as soon as its entry is in a node's log, committed or not; cutting the entry away restores the previous one.

Learners receive the log and count for nothing: they neither vote nor count towards a commit, and never
campaign. A voter joins only by promotion of a learner that has caught up.

A CONFIG entry also carries the group id (the identity its stores record, named at HELLO: raft/member.py),
so that a node that joins the group learns it from the entry that adds it. The id is not part of the
configuration (`Membership`): `encode` takes it and `decode_with_id` returns it beside the configuration.
Bodies written without it (FORMAT 1: by the previous version, or by `quorumlog members force-recover`)
still decode, to no id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgpack

from ..errors import QuorumLogError, ResponseCode

# The first field of an encoded configuration, which says its layout:
FORMAT = 1  # [1, voters, learners, addresses]
FORMAT_GROUP_ID = 2  # [2, voters, learners, addresses, group id]
MAX_ID = 255
MAX_GROUP_ID = 64  # (a HELLO names it: net/schemas.py)


class MembershipError(QuorumLogError):
    """A change that would not leave a valid configuration, or a malformed CONFIG body."""

    code = ResponseCode.UNEXPECTED_ARGUMENT


def _check_id(node: object) -> str:
    if (not isinstance(node, str) or not node or len(node) > MAX_ID or node == "*" or node == "client"
            or node.startswith("client:")):  # ("*" is the abstained vote; the others are clients' ids)
        raise MembershipError(f"invalid member id {node!r}")
    return node


def check_group_id(group_id: object) -> str:
    """A group id as a CONFIG entry carries it and a store records it (one line, no '=' or NUL)."""
    if (not isinstance(group_id, str) or not group_id or len(group_id) > MAX_GROUP_ID
            or group_id.splitlines() != [group_id] or "=" in group_id or "\x00" in group_id):
        raise MembershipError(f"invalid group id {group_id!r}")
    return group_id


@dataclass(frozen=True, slots=True)
class Membership:
    """Voters, learners (disjoint; at least one voter) and the address of each member that has one."""

    voters: frozenset[str]
    learners: frozenset[str] = frozenset()
    addresses: tuple[tuple[str, str], ...] = ()  # (id, host:port), sorted by id

    def __post_init__(self) -> None:
        for n in (*self.voters, *self.learners):
            _check_id(n)
        if not self.voters:
            raise MembershipError("a configuration needs at least one voter")
        both = self.voters & self.learners
        if both:
            raise MembershipError(f"{', '.join(sorted(both))} both voter and learner")
        ids = [a[0] for a in self.addresses]
        if ids != sorted(set(ids)) or not set(ids) <= self.voters | self.learners:
            raise MembershipError(f"addresses {ids} must name members, once each, in order")
        for _n, addr in self.addresses:
            if not isinstance(addr, str) or ":" not in addr or len(addr) > 1024:
                raise MembershipError(f"invalid address {addr!r}: expected host:port")

    @classmethod
    def of(cls, voters: Iterable[str], learners: Iterable[str] = (),
           addresses: Mapping[str, str] | None = None) -> Membership:
        return cls(frozenset(voters), frozenset(learners), tuple(sorted((addresses or {}).items())))

    # -- reading ---------------------------------------------------------------------------------
    @property
    def members(self) -> list[str]:
        """Every member, voters and learners, sorted (iteration order must not depend on hashing)."""
        return sorted(self.voters | self.learners)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def address(self, node: str) -> str | None:
        return dict(self.addresses).get(node)

    def role_of(self, node: str) -> str | None:
        """"voter", "learner", or None for a node outside the configuration."""
        return "voter" if node in self.voters else "learner" if node in self.learners else None

    def encode(self, group_id: str | None = None) -> bytes:
        """A CONFIG entry's body; with `group_id`, carrying it (FORMAT_GROUP_ID), else as FORMAT 1."""
        doc = [FORMAT, sorted(self.voters), sorted(self.learners), dict(self.addresses)]
        if group_id is not None:
            doc[0] = FORMAT_GROUP_ID
            doc.append(check_group_id(group_id))
        return msgpack.packb(doc)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> Membership:
        """A CONFIG entry's configuration; MembershipError when it is not a valid configuration."""
        return cls.decode_with_id(data)[0]

    @classmethod
    def decode_with_id(cls, data: bytes | bytearray | memoryview) -> tuple[Membership, str | None]:
        """A CONFIG entry's configuration and the group id it carries (None for a FORMAT 1 body);
        MembershipError when it is not a valid configuration."""
        try:
            doc = msgpack.unpackb(bytes(data), use_list=True, strict_map_key=True)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
            raise MembershipError(f"a CONFIG body that does not decode: {e}") from None
        layout = {FORMAT: 4, FORMAT_GROUP_ID: 5}
        if (not isinstance(doc, list) or not doc or type(doc[0]) is not int or layout.get(doc[0]) != len(doc)
                or not isinstance(doc[1], list) or not isinstance(doc[2], list) or not isinstance(doc[3], dict)):
            raise MembershipError("a CONFIG body of another layout")
        if not all(isinstance(x, str) for x in (*doc[1], *doc[2], *doc[3], *doc[3].values())):
            raise MembershipError("a CONFIG body whose ids or addresses are not strings")
        voters, learners = frozenset(doc[1]), frozenset(doc[2])
        if len(voters) != len(doc[1]) or len(learners) != len(doc[2]):
            raise MembershipError("a CONFIG body naming a member twice")
        group_id = check_group_id(doc[4]) if doc[0] == FORMAT_GROUP_ID else None
        return cls(voters, learners, tuple(sorted(doc[3].items()))), group_id

    # -- changes: each returns the next configuration, or raises MembershipError saying why not -------
    def with_learner(self, node: str, address: str | None = None) -> Membership:
        _check_id(node)
        if node in self.voters or node in self.learners:
            raise MembershipError(f"{node} is a {self.role_of(node)} already")
        return self._with(learners=self.learners | {node}, address=(node, address))

    def promoted(self, node: str) -> Membership:
        if node not in self.learners:
            what = "a voter already" if node in self.voters else "not a member"
            raise MembershipError(f"{node} is {what}: only a learner is promoted")
        return self._with(voters=self.voters | {node}, learners=self.learners - {node})

    def without(self, node: str) -> Membership:
        if node not in self.voters and node not in self.learners:
            raise MembershipError(f"{node} is not a member")
        if self.voters == {node}:
            raise MembershipError(f"{node} is the only voter: a group needs one")
        return self._with(voters=self.voters - {node}, learners=self.learners - {node}, drop=node)

    def with_address(self, node: str, address: str) -> Membership:
        if node not in self.voters and node not in self.learners:
            raise MembershipError(f"{node} is not a member")
        return self._with(address=(node, address))

    def _with(self, *, voters: frozenset[str] | None = None, learners: frozenset[str] | None = None,
              address: tuple[str, str | None] | None = None, drop: str | None = None) -> Membership:
        addrs = dict(self.addresses)
        if drop is not None:
            addrs.pop(drop, None)
        if address is not None and address[1] is not None:
            addrs[address[0]] = address[1]
        return Membership(self.voters if voters is None else voters,
                          self.learners if learners is None else learners, tuple(sorted(addrs.items())))


def carried_group_id(configs: Sequence[tuple[int, int, bytes]]) -> str | None:
    """The group id carried by the newest of a log's CONFIG entries (LogStore.configs) that carries one;
    None when none does (none holds a change, or they were written without it). An entry that does not
    decode counts as carrying none."""
    for _index, _term, body in reversed(configs):
        try:
            group_id = Membership.decode_with_id(body)[1]
        except MembershipError:
            continue
        if group_id is not None:
            return group_id
    return None


def single_server_step(old: Membership, new: Membership) -> str | None:
    """Why `new` may not follow `old` directly (None when it may): more than one voter added or removed
    at once, or a voter added that was not a learner of `old` (a voter joins by promotion)."""
    added, removed = new.voters - old.voters, old.voters - new.voters
    if len(added) + len(removed) > 1:
        return (f"a change adds or removes one voter at a time (this one: +{sorted(added)} -{sorted(removed)})")
    if added and not added <= old.learners:
        return f"{next(iter(added))} joins the voters only by promotion of a learner"
    return None
