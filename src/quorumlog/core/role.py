"""A member's role, the same three for both replication modes: a primary/backup primary is a LEADER and a
backup a FOLLOWER, so status, metadata, redirects and the client's leader search need no second vocabulary."""

from __future__ import annotations

from enum import IntEnum


class Role(IntEnum):
    """Member roles (DLedger's MemberState.Role); a pre-vote round is a CANDIDATE that has not raised its term."""

    FOLLOWER = 0
    CANDIDATE = 1
    LEADER = 2
