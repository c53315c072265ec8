"""The role transitions of a Raft member, as one table (in the manner of h11's state machine).

Only `RaftNode` changes role, term, leader and vote, and only through this table: the elector and the
router report an `Outcome` (an event with what it carries) and the node looks up where the event leads
from its current role. An event the table does not allow from a role is a bug; the node counts it as
`bug_transition_<ROLE>_<EVENT>` (the simulator fails on any `bug_` counter) and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from ..core.role import Role


class Event(Enum):
    ELECTION_TIMEOUT = auto()  # no leader heard for an election timeout: pre-vote (or campaign without it)
    PRE_VOTE_WON = auto()  # a majority would vote for us: campaign for real
    TIMEOUT_NOW = auto()  # our leader hands over to us: campaign at once
    ELECTED = auto()  # a majority voted for us in our term
    VOTED = auto()  # we grant our vote in the current term (written before the answer leaves)
    HIGHER_TERM = auto()  # a message of a later term (its sender may be the leader of that term)
    LEADER_SEEN = auto()  # the leader of our term pushed or heartbeat
    QUORUM_LOST = auto()  # check-quorum: no majority heard within an election timeout
    CORRUPTION = auto()  # a stored entry failed its checks: stop leading, re-fetch from the peers
    REMOVED = auto()  # a configuration without this node as a voter committed: stop leading


@dataclass(frozen=True, slots=True)
class Outcome:
    """An event and what it carries: the term it names, the leader it names, who caused it."""

    event: Event
    term: int = -1
    leader: str | None = None
    by: str | None = None


FOLLOWER, CANDIDATE, LEADER = Role.FOLLOWER, Role.CANDIDATE, Role.LEADER

TRANSITIONS: dict[Role, dict[Event, Role]] = {
    FOLLOWER: {
        Event.ELECTION_TIMEOUT: CANDIDATE,
        Event.TIMEOUT_NOW: CANDIDATE,
        Event.VOTED: FOLLOWER,
        Event.HIGHER_TERM: FOLLOWER,
        Event.LEADER_SEEN: FOLLOWER,
        Event.CORRUPTION: FOLLOWER,
    },
    CANDIDATE: {
        Event.ELECTION_TIMEOUT: CANDIDATE,
        Event.PRE_VOTE_WON: CANDIDATE,
        Event.ELECTED: LEADER,
        Event.HIGHER_TERM: FOLLOWER,
        Event.LEADER_SEEN: FOLLOWER,
        Event.CORRUPTION: FOLLOWER,
    },
    LEADER: {
        Event.HIGHER_TERM: FOLLOWER,
        Event.QUORUM_LOST: FOLLOWER,
        Event.CORRUPTION: FOLLOWER,
        Event.REMOVED: FOLLOWER,
    },
}


def next_role(role: Role, event: Event) -> Role | None:
    """Where `event` leads from `role`, or None when the table does not allow it."""
    return TRANSITIONS[role].get(event)
