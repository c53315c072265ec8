"""Membership changes drawn by the simulator (the "members" fault): spare nodes join as learners and are
promoted, voters and learners are removed (the leader too), addresses change, so that a group moves
between three and five voters under every other fault. Drawn from a stream of their own, so that a seed's
other faults stay what they were without this one."""

from __future__ import annotations

import random
from collections.abc import Callable

from ..raft.membership import Membership
from ..raft.node import RaftNode

Change = Callable[[Membership], Membership]
MIN_VOTERS, MAX_VOTERS = 3, 5
MAX_MEMBERS = 7
CHANGE_CHANCE = 0.02  # per step, when a leader is known and no change of its is pending


def spare_ids(nodes: int, spares: int) -> list[str]:
    """The ids of the spare nodes, after the first members n0..n{nodes-1}."""
    return [f"n{i}" for i in range(nodes, nodes + spares)]


def draw_change(rng: random.Random, leader: RaftNode, ids: list[str], calm: bool) -> tuple[str, Change] | None:
    """A change for `leader` to propose (a description and the change), or None this step. Not `calm`
    (a node recovers lost data, or has yet to find its group): no promotion and no voter removed, which
    would leave a group already short of a voter able to vote without a majority of its voters (an
    operator's choice, not a Raft fault)."""
    if rng.random() >= CHANGE_CHANCE or leader.pending_change is not None:
        return None
    cfg = leader.member.config
    voters, learners = sorted(cfg.voters), sorted(cfg.learners)
    outside = [i for i in ids if i not in cfg.voters and i not in cfg.learners]
    options: list[tuple[str, Change]] = []
    if outside and len(voters) + len(learners) < MAX_MEMBERS:
        new = rng.choice(outside)
        options.append((f"add learner {new}", lambda m: m.with_learner(new, f"10.0.0.{new[1:]}:9000")))
    if learners and len(voters) < MAX_VOTERS and calm:
        p = rng.choice(learners)
        options.append((f"promote {p}", lambda m: m.promoted(p)))
    if learners:
        gone = rng.choice(learners)
        options.append((f"remove learner {gone}", lambda m: m.without(gone)))
    if len(voters) > MIN_VOTERS and calm:
        v = rng.choice(voters)  # the leader itself, at times
        options.append((f"remove voter {v}", lambda m: m.without(v)))
    moved = rng.choice(voters + learners)
    port = rng.randint(9000, 9999)
    options.append((f"move {moved} to port {port}", lambda m: m.with_address(moved, f"10.0.0.{moved[1:]}:{port}")))
    return rng.choice(options)
