"""Membership safety for a node whose store is pristine: it may be new, or it may have been wiped.

A wiped store forgets the votes it cast and the entries it acknowledged, and a node that forgot them must
neither vote nor count towards a commit until it is sure it cannot contradict its former self. It cannot
tell a wipe from a first start on its own, so before it votes it probes every other member:

- some member holds a log (or any message from a leader arrives): the group exists. The node joins in
  protocol-aware recovery (it neither votes nor campaigns until it has committed up to the end of the
  first leader it hears from, see node.py) and takes the highest term it was told of as already voted in;
- every other member answers, all with empty logs: no leader was ever elected, so nothing this node could
  have promised matters except votes, and those were for terms no higher than the terms the members
  report. It bootstraps the group, with the highest reported term counted as voted.

Either outcome is recorded in the store (the group id, or a term voted in while the id is yet to come
from a CONFIG entry: reconfig.py), so later restarts skip the probe. The probe's
nonce is drawn once per process start: an answer given before this start proves nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .member import MemberState
from .messages import ProbeRequest, ProbeResponse

JOIN = "join"  # the group exists: recover before voting
BOOTSTRAP = "bootstrap"  # the group is new: vote and campaign as usual


@dataclass(slots=True)
class Joiner:
    """Probe bookkeeping of one pristine node; `decide` says when the answers settle the question."""

    member: MemberState
    nonce: int
    interval_ms: int
    next_probe: int = 0
    answers: dict[str, ProbeResponse] = field(default_factory=dict)

    @classmethod
    def create(cls, member: MemberState, rng: random.Random, interval_ms: int) -> Joiner:
        return cls(member, rng.getrandbits(62), interval_ms)

    def probes(self, now: int) -> list[ProbeRequest]:
        """Probes for the members that have not answered yet, once per interval."""
        if now < self.next_probe:
            return []
        self.next_probe = now + self.interval_ms
        m = self.member
        return [ProbeRequest(m.group, m.node_id, p, m.term, self.nonce) for p in m.others if p not in self.answers]

    def on_response(self, resp: ProbeResponse) -> str | None:
        """Record an answer; JOIN, BOOTSTRAP, or None while undecided."""
        if resp.nonce != self.nonce:
            return None  # an answer to an earlier incarnation's probe
        self.answers[resp.sender] = resp
        if resp.end_index >= 0 or resp.begin_index > 0:
            return JOIN
        if all(p in self.answers for p in self.member.others):
            return BOOTSTRAP
        return None

    @property
    def highest_term(self) -> int:
        return max((a.term for a in self.answers.values()), default=0)


def opens_first_election(member: MemberState, preferred_leader: str | None) -> bool:
    """Whether this member campaigns as soon as it bootstraps its group: every member answered with an
    empty log, so there is no leader to wait out. One member does (the preferred leader, else the lowest
    id); the others keep their election timeouts, in case it cannot win."""
    first = preferred_leader if preferred_leader in member.members else member.members[0]
    return first == member.node_id
