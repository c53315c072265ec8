"""The simulator's liveness checks: once faults heal, the cluster must elect a leader and converge."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..raft.node import RaftNode
from .checker import InvariantViolation

if TYPE_CHECKING:
    from .cluster import Cluster


def current_leader(cluster: Cluster) -> RaftNode | None:
    """The running leader of the highest term, if any."""
    best: RaftNode | None = None
    for i in cluster.ids:
        n = cluster.sims[i].node
        if n is not None and n.is_leader and (best is None or n.term > best.term):
            best = n
    return best


def check_liveness(cluster: Cluster, step: int) -> None:
    """After the faults healed: a leader within a few election timeouts; at the end of the heal period,
    every request answered and every member of the leader's configuration converged on it."""
    assert cluster.heal_started is not None
    raft = cluster.cfg.raft
    leader = current_leader(cluster)
    if leader is not None:
        cluster.leader_seen_after_heal = True
    limit = 6 * (raft.election_timeout_ms + raft.election_backoff_ms) + 200
    if not cluster.leader_seen_after_heal and cluster.time - cluster.heal_started > limit:
        raise InvariantViolation(f"no leader {cluster.time - cluster.heal_started} ms after the faults healed")
    last_of_window = step == cluster.cfg.steps - 1 or cluster.phase(step + 1) == "faults"
    if not last_of_window:
        return
    if leader is None:
        raise InvariantViolation("no leader at the end of a heal period")
    stale = [(k, p.at) for k, p in cluster.outstanding.items()]
    if stale:
        raise InvariantViolation(f"requests never answered after the faults healed: {stale[:5]}")
    lc = leader.store.committed_index
    if lc != leader.store.end_index:
        raise InvariantViolation(f"leader {leader.node_id} has uncommitted entries "
                                 f"{lc + 1}..{leader.store.end_index} after a quiet period")
    members = leader.member.config.members  # (a node removed from the group need not follow it)
    for i in members:
        n = cluster.sims[i].node
        if n is None:
            raise InvariantViolation(f"{i} not running after the heal")
        c = n.store.committed_index
        # A learner added late may still be catching up on a long log: it must follow and move, not be done.
        catching_up = i in leader.member.config.learners and cluster.heal_commits.get(i, -1) < c < lc
        if (c != lc and not catching_up) or n.term != leader.term or n.leader_id != leader.node_id:
            raise InvariantViolation(f"{i} has not converged: commit {n.store.committed_index} term {n.term} "
                                     f"leader {n.leader_id}; leader {leader.node_id} commit {lc} "
                                     f"term {leader.term}")
        if n.member.config != leader.member.config:
            raise InvariantViolation(f"{i} follows {n.member.config}, its leader {leader.member.config}")
    damaged = cluster.checker.damaged & set(members)
    if damaged:
        raise InvariantViolation(f"nodes still recovering lost data: {sorted(damaged)}")
