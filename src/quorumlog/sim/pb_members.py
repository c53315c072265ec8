"""Membership changes in the primary/backup simulator (pb.py, the "members" fault): a backup is removed
from the group and later added back (a learner of the controller group, which makes it a member of the
primary/backup group again: ha/record.py, then promoted to voter), through the controller group's leader
as `quorumlog members` does. Drawn from a stream of their own, so that a seed's other faults stay what
they were without this one. The heal adds back every member removed, so that the group ends whole.

A backup is removed only as a careful operator would: not the recorded primary (the server refuses
that), not the primary an epoch would be handed back to (`holder`, `previous`: the record could then only
wait for the operator), and only while another recorded in-sync backup holds every acknowledged entry.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ..core.role import Role
from ..raft.membership import Membership
from .pb_ctl import CtlReplica

if TYPE_CHECKING:
    from .pb import PbCluster

CHANGE_CHANCE = 0.01  # per step, while calm and no change of the leader's is pending: a removal
BACK_CHANCE = 0.05  # the same, for adding a removed member back or promoting it (storage faults wait meanwhile)


def whole(c: PbCluster) -> bool:
    """Every node a voter of the controller group, as every running replica of it sees it: a disk is lost
    (the wipe and rot faults) only then. A group shrunk to two voters that loses one's store has no
    majority left to elect with, as any two-member Raft group (an operator who removes a member first adds
    one, or accepts that)."""
    ids = set(c.ids)
    return all(m.ctl.node.member.config.voters == ids and not m.ctl.node.member.config.learners
               for m in c.members.values() if m.ctl is not None)


def _leader(c: PbCluster) -> CtlReplica | None:
    for m in c.members.values():
        if m.ctl is not None and m.node is not None and m.paused_until is None and m.ctl.node.role == Role.LEADER:
            return m.ctl
    return None


def _change(c: PbCluster, r: CtlReplica, what: str, change: object) -> None:
    c.stats["member_changes_asked"] += 1
    c._trace(r.member, f"MEMBERS: {what}")
    r.apply(r.node.change_members(change, c.time), c.time)  # type: ignore[arg-type]


def draw(c: PbCluster, rng: random.Random) -> None:
    """One change, at times, while the record is settled and no copy is lost."""
    r = _leader(c)
    if r is None or r.node.pending_change is not None:
        return
    cfg = r.node.member.config
    outside = [i for i in c.ids if i not in cfg.members]
    chance = BACK_CHANCE if outside or cfg.learners else CHANGE_CHANCE
    if rng.random() >= chance or not (c._no_copy_lost() and c._record_settled()):
        return
    if outside:
        new = rng.choice(outside)
        _change(c, r, f"add {new}", lambda m: m.with_learner(new))
    elif cfg.learners:
        p = sorted(cfg.learners)[0]
        _change(c, r, f"promote {p}", lambda m: m.promoted(p))
    else:
        a = c.record
        keep = {a.primary, a.holder, a.previous}
        removable = [i for i in sorted(a.isr) if i not in keep and a.isr - {i}]
        if removable and len(cfg.voters) >= 3:
            gone = rng.choice(removable)
            _change(c, r, f"remove {gone}", lambda m: m.without(gone))


def restore(c: PbCluster) -> None:
    """The heal: add back each member removed, and promote it once it caught up (asked again each step
    until done: a refusal is only a completion)."""
    r = _leader(c)
    if r is None or r.node.pending_change is not None:
        return
    cfg: Membership = r.node.member.config
    outside = [i for i in c.ids if i not in cfg.members]
    if outside:
        _change(c, r, f"add {outside[0]} (heal)", lambda m: m.with_learner(outside[0]))
    elif cfg.learners and c.time % 200 == 0:
        p = sorted(cfg.learners)[0]
        _change(c, r, f"promote {p} (heal)", lambda m: m.promoted(p))
