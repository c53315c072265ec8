"""The controller's record as a state machine: conditional commands, duplicates, garbage, expiry."""

from __future__ import annotations

from dataclasses import replace

import msgpack

from quorumlog.config import HaConfig, RaftConfig, StoreConfig
from quorumlog.ha.controller_core import ControllerCore
from quorumlog.ha.epochs import hand_back_to
from quorumlog.ha.node import HaNode
from quorumlog.ha.record import (
    ELECT,
    HAND_OFF,
    ISR,
    PREFIX,
    SNAPSHOT,
    SYNC,
    TAKE,
    TAKES,
    Assignment,
    ControllerState,
    encode_command,
    encode_election,
)
from quorumlog.sim.script import Script
from quorumlog.store.memory import MemoryStore


def _state() -> ControllerState:
    s = ControllerState({"g0": Assignment(1, "n0", frozenset({"n1", "n2"}))})
    s.untouched.add("g0")
    return s


def test_an_election_applies_only_to_the_epoch_it_replaces() -> None:
    s = _state()
    a = s.groups["g0"]
    assert s.apply(encode_election("g0", a, "n1", {"n1", "n2"})) == "g0"
    assert s.groups["g0"] == Assignment(2, "n1", frozenset({"n2"}), 1, previous="n0", isr_seen=True, taken=False,
                                       holder="n0", holder_isr=frozenset({"n1", "n2"}))
    # A second election made from the same view (a race, a retry) finds epoch 2 taken: no-op.
    assert s.apply(encode_election("g0", a, "n2", {"n1", "n2"})) is None
    assert s.apply(encode_command(ELECT, "g0", 2, 4, "n2", set(), 1, TAKES)) is None  # epochs go one at a time
    assert s.groups["g0"].primary == "n1"


def test_commands_naming_outsiders_or_of_the_old_forms_are_refused() -> None:
    """Issue 34: anyone who may append to the controller group could write any command. A forged election
    without a version, or without the takeover flag (which made its primary the holder of every
    acknowledged entry), or naming a primary or in-sync member outside the group, is no command."""
    s = _state()
    a = s.groups["g0"]
    for forged in (encode_command(ELECT, "g0", 1, 2, "n1", {"n2"}),  # no version
                   encode_command(ELECT, "g0", 1, 2, "n1", {"n2"}, 0),  # no takeover flag
                   encode_command(ELECT, "g0", 1, 2, "n1", {"n2"}, 0, 0),
                   encode_election("g0", a, "n9", {"n1"}),  # a primary outside the members
                   encode_election("g0", a, "n1", {"n1", "n9"}),  # an in-sync set outside them
                   encode_command(ISR, "g0", 0, 1, "n0", {"n1", "n9"}),
                   encode_command(HAND_OFF, "g0", 1, 1, "n0", {"n9"})):
        assert s.apply(forged) is None
    assert s.groups["g0"] == a and "g0" in s.untouched


def test_an_in_sync_change_needs_the_version_epoch_and_primary_it_was_made_from() -> None:
    s = _state()
    shrink = encode_command(ISR, "g0", 0, 1, "n0", {"n1"})
    assert s.apply(shrink) == "g0"
    assert s.groups["g0"].isr == {"n1"}
    grow = encode_command(ISR, "g0", 1, 1, "n0", {"n1", "n2"})
    assert s.apply(grow) == "g0" and s.groups["g0"].isr == {"n1", "n2"}
    # A late duplicate of the shrink must not undo the newer change.
    assert s.apply(shrink) is None and s.groups["g0"].isr == {"n1", "n2"}
    # Another node cannot change the set, nor anyone for another epoch.
    assert s.apply(encode_command(ISR, "g0", 2, 1, "n1", {"n2"})) is None
    assert s.apply(encode_command(ISR, "g0", 2, 2, "n0", {"n2"})) is None


def test_entries_that_are_not_commands_change_nothing() -> None:
    s = _state()
    # Right length, wrong shapes: each raised TypeError out of apply, which stopped the record there.
    shapes = ([ELECT, "g0", 1, 2, "n1", 5], [ELECT, ["g0"], 1, 2, "n1", []], [ISR, "g0", 0, 1, "n0", [1, [2]]],
              [HAND_OFF, "g0", 1, 1, "n0", 5], [ELECT, "g0", "1", 2, "n1", []], [ELECT, "g0", 1, 2, None, []],
              [ELECT, "g0", 1, 2, "n1", [], 0, "1"], [ELECT, "g0", 1, 2, "n1", [], 0, 1, 1], [TAKE, "g0", 1, 1, 5, []])
    for body in (b"", b"hello", b"QLCTL1", b"QLCTL1\xc1", encode_command("drop", "g0", 1, 2, "n1", set()),
                 encode_command(ELECT, "g9", 1, 2, "n1", set()), *(PREFIX + msgpack.packb(c) for c in shapes)):
        assert s.apply(body) is None
    assert s.groups["g0"] == Assignment(1, "n0", frozenset({"n1", "n2"}))


class _Log:
    """A controller group's committed log, in a real MemoryStore with small segments that expire."""

    def __init__(self) -> None:
        self.store = MemoryStore(StoreConfig(data_segment_bytes=4096, index_segment_bytes=8192, max_body_bytes=1024,
                                             file_reserved_hours=0))

    def commit(self, body: bytes) -> None:
        self.store.append([body], 1)
        self.store.flush()
        self.store.set_committed(self.store.end_index)


def _replica() -> ControllerState:
    s = ControllerState({})
    s.add_default("g0", Assignment(1, "n0", frozenset({"n1", "n2"})))
    return s


def test_replicas_converge_byte_for_byte_after_expiry_and_a_restart() -> None:
    """Issue fault 1: a replica restarted on a log whose start expired took the first command it met for a
    group as the record ("trust_first"), restarting the version at 1; every later conditional command then
    failed on that replica only, and two replicas named two primaries for one epoch. The record now never
    depends on how much of the log remains: a replica that missed the log's start applies nothing until a
    snapshot, written by the leader right after the entries it sums up, and expiry keeps the last one."""
    log, full = _Log(), _replica()
    for i in range(120):  # many elections and in-sync changes: the log spans several segments
        a = full.groups["g0"]
        log.commit(encode_election("g0", a, ("n1", "n2", "n0")[i % 3], {"n0", "n1", "n2"}) if i % 2 else
                   encode_command(ISR, "g0", a.version, a.epoch, a.primary, set(a.isr) - {"n1"}))
        full.catch_up(log.store)
    log.commit(full.snapshot())  # the leader: as of the last entry applied, written right after it
    for _ in range(3):
        log.commit(encode_command(SYNC, "g0", 0, 0, "n0", set()))
    full.catch_up(log.store)
    assert full.snapshot_index == log.store.end_index - 3 and full.since_snapshot == 3
    a = full.groups["g0"]
    log.commit(encode_election("g0", a, "n2", {"n0", "n2"}))  # (a conditional command after the snapshot)
    full.catch_up(log.store)
    cap = full.expiry_cap()
    assert log.store.expire(cap, 1e9) > 0 and 0 < log.store.begin_index <= full.snapshot_index
    restarted = _replica()  # a restart: nothing applied, the defaults of its config
    restarted.catch_up(log.store)
    assert restarted.whole and restarted.encode() == full.encode()
    assert restarted.groups["g0"].version == full.groups["g0"].version > 100
    # Both apply what comes next alike: a command made from the record, and a stale one.
    a = full.groups["g0"]
    log.commit(encode_election("g0", a, "n0", {"n0", "n1"}))
    log.commit(encode_election("g0", a, "n1", {"n0", "n1"}))
    full.catch_up(log.store)
    restarted.catch_up(log.store)
    assert restarted.encode() == full.encode() and full.groups["g0"].primary == "n0"


def test_a_replica_whose_log_starts_after_its_record_acts_on_nothing_until_a_snapshot() -> None:
    log, full = _Log(), _replica()
    for _ in range(200):
        log.commit(encode_command(SYNC, "g0", 0, 0, "n0", set()))
    assert log.store.expire(log.store.end_index - 1, 1e9) > 0  # (as a log expired before snapshots existed)
    late = _replica()
    a = full.groups["g0"]
    log.commit(encode_election("g0", a, "n1", {"n1"}))
    late.catch_up(log.store)
    assert not late.whole and late.groups["g0"] == a  # the command met no record: not applied
    stale = late.snapshot()
    log.commit(encode_command(SYNC, "g0", 0, 0, "n0", set()))
    log.commit(stale)  # not right after the entries it sums up: ignored by every replica alike
    late.catch_up(log.store)
    assert not late.whole
    full = _replica()  # a replica of the whole log, in a second store that kept it: the leader
    full.groups["g0"] = replace(a, epoch=2, primary="n1", isr=frozenset(), version=1, previous="n0",
                                isr_seen=False, taken=False, holder="n0")
    full.untouched.clear()
    full.applied = log.store.end_index
    log.commit(full.snapshot())
    late.catch_up(log.store)
    assert late.whole and late.encode() == full.encode() and late.snapshot_index == log.store.end_index


def test_a_snapshot_of_the_wrong_shape_changes_nothing() -> None:
    s = _replica()
    for fields in ([SNAPSHOT, 5], [SNAPSHOT, "0", []], [SNAPSHOT, -1, [["g0", 2]]], [SNAPSHOT, -1, [5]],
                   [SNAPSHOT, -1, [["g0", 2, "n1", [], 1, "", True, "", True, "", "yes"]]]):
        assert s.apply(PREFIX + msgpack.packb(fields), 0) is None
    assert s.groups["g0"] == Assignment(1, "n0", frozenset({"n1", "n2"})) and s.snapshot_index == -1


def test_a_hand_off_request_needs_the_epoch_and_primary_and_an_election_ends_it() -> None:
    s = _state()
    assert s.apply(encode_command(HAND_OFF, "g0", 1, 1, "n1", {"n2"})) is None  # not the primary
    assert s.apply(encode_command(HAND_OFF, "g0", 0, 0, "n0", {"n2"})) is None  # not its epoch
    assert s.apply(encode_command(HAND_OFF, "g0", 1, 1, "n0", {"n2"})) == "g0"
    a = s.groups["g0"]
    assert a.hand_off == "n2" and (a.epoch, a.primary, a.isr, a.version) == (1, "n0", {"n1", "n2"}, 0)
    assert "g0" not in s.untouched  # a primary that asked for a hand-off held data: the group is not new
    assert s.apply(encode_command(ISR, "g0", 0, 1, "n0", {"n2"})) == "g0" and s.groups["g0"].hand_off == "n2"
    assert s.apply(encode_command(HAND_OFF, "g0", 1, 1, "n0", set())) == "g0" and s.groups["g0"].hand_off == ""
    assert s.apply(encode_command(HAND_OFF, "g0", 1, 1, "n0", {"n2"})) == "g0"
    assert s.apply(encode_election("g0", s.groups["g0"], "n2", {"n2"})) == "g0"
    assert s.groups["g0"].hand_off == "" and s.groups["g0"].primary == "n2"


def test_an_election_made_from_an_older_record_is_a_no_op() -> None:
    """Chaos run (primary/backup, partitions and full disks, seed 1002): a primary that restarted asked to be
    elected again with the in-sync set of a record it had not caught up with; the set had lost n0 since
    (it fell behind), the election put n0 back, and the next failover elected n0 without entries
    acknowledged meanwhile. An election names the record version it was made from, as an in-sync change
    does, and applies only to that version."""
    s = _state()
    assert s.apply(encode_command(ISR, "g0", 0, 1, "n0", set())) == "g0"  # version 1: nobody in sync
    stale = encode_command(ELECT, "g0", 1, 2, "n0", {"n1", "n2"}, version=0, flags=TAKES)
    assert s.apply(stale) is None and s.groups["g0"].epoch == 1
    fresh = encode_command(ELECT, "g0", 1, 2, "n0", set(), version=1, flags=TAKES)
    assert s.apply(fresh) == "g0" and s.groups["g0"].isr == frozenset() and s.groups["g0"].epoch == 2


def test_a_takeover_needs_the_epoch_and_primary_and_voids_elections_made_before_it() -> None:
    """An election's primary commits nothing before its takeover is recorded; until then the record knows
    the epoch acknowledged nothing, and the primary of the last epoch taken (holder) holds every entry."""
    s = _state()
    assert s.apply(encode_election("g0", s.groups["g0"], "n1", {"n1", "n2"})) == "g0"
    a = s.groups["g0"]
    assert (a.epoch, a.primary, a.taken, a.holder, a.version) == (2, "n1", False, "n0", 1)
    before = encode_election("g0", a, "n0", set())  # made from a view without the takeover
    assert s.apply(encode_command(TAKE, "g0", 2, 2, "n2", set())) is None  # not the primary
    assert s.apply(encode_command(TAKE, "g0", 1, 1, "n1", set())) is None  # not its epoch
    assert s.apply(encode_command(TAKE, "g0", 2, 2, "n1", set())) == "g0"
    a = s.groups["g0"]
    assert (a.taken, a.holder, a.version, a.isr) == (True, "n1", 2, {"n2"})
    assert s.apply(before) is None and s.groups["g0"].primary == "n1"  # it would hand back a taken epoch
    # Elections of epochs never taken keep the holder: it is still the one that holds every entry.
    assert s.apply(encode_election("g0", s.groups["g0"], "n2", {"n2"})) == "g0"
    assert s.apply(encode_election("g0", s.groups["g0"], "n0", set())) == "g0"
    a = s.groups["g0"]
    assert (a.epoch, a.primary, a.previous, a.taken, a.holder) == (4, "n0", "n2", False, "n1")


def test_a_takeover_with_nobody_in_sync_keeps_the_holder_from_before_it() -> None:
    """The simulator's seed 213973: n1 elected with nobody in sync, its takeover recorded after its disk was
    lost. Nothing was acknowledged in its epoch (no backup in sync since the takeover), so the holder from
    before it still holds every acknowledged entry and is the one to elect; a backup recorded in sync after
    the takeover makes the primary the holder."""
    s = _state()
    assert s.apply(encode_election("g0", s.groups["g0"], "n1", set()), 1) == "g0"
    assert s.apply(encode_command(TAKE, "g0", 2, 2, "n1", set()), 2) == "g0"
    a = s.groups["g0"]
    assert (a.taken, a.isr_seen, a.holder) == (True, False, "n0")
    assert hand_back_to(a.taken, a.holder, a.isr_seen) == "n0"
    assert s.apply(encode_command(ISR, "g0", a.version, 2, "n1", {"n2"}), 3) == "g0"
    a = s.groups["g0"]
    assert (a.isr_seen, a.holder) == (True, "n1") and hand_back_to(a.taken, a.holder, a.isr_seen) == ""


def test_the_record_keeps_who_was_in_sync_as_the_last_epoch_taken_ended() -> None:
    """Issue 30's fault 5: the record named one member holding every acknowledged entry (`holder`) and
    forgot the others in sync with it; a holder that lost its store then waited for an operator."""
    s = _state()
    a = s.groups["g0"]
    assert a.taken  # (epoch 1, the configured primary's, counts as taken)
    assert s.apply(encode_election("g0", a, "n1", set()), 1) == "g0"  # a failover with nobody live beside n1
    a = s.groups["g0"]
    assert (a.holder, a.holder_isr, a.taken) == ("n0", {"n1", "n2"}, False)  # epoch 1 ended with {n1, n2}
    assert s.apply(encode_election("g0", a, "n0", set()), 2) == "g0"  # n1 lost: back to the holder
    a = s.groups["g0"]
    assert (a.primary, a.holder, a.holder_isr) == ("n0", "n0", {"n2"})  # (n1, elected and lost, is no heir)


def test_a_lost_holder_elects_one_in_sync_with_it_as_its_last_epoch_ended() -> None:
    """Seed 916914 (5 nodes) of the simulator before it ran the real controller: the record handed epoch 7
    back to n4, its holder, whose store was lost too; nothing else could be elected, though n0, n2 and n3 had
    been in sync with n4 and held every entry. The holder now elects one of them."""
    ids = ["n0", "n1", "n2", "n3", "n4"]
    ctl = Script(ids, group="ctl")
    ctl.elect("n4")
    ha = HaConfig(replication="primary-backup", primary="n0", controller="ctl")
    store = MemoryStore()
    store.append([b"x"], 7)
    store.flush()
    store.save_vote(7, "n4")
    store.set_recovering(True)  # (its recovery cut a torn tail: it may lack what it acknowledged)
    node = HaNode("n4", "pb", ids, store, ha, RaftConfig(), 0)
    core = ControllerCore("n4", {"pb": ("ctl", ids, ha)})
    record = core.states["ctl"]
    record.catch_up(ctl.stores["n4"])
    record.groups["pb"] = Assignment(7, "n4", frozenset(), 9, "n1", False, taken=False, holder="n4",
                                     holder_isr=frozenset({"n0", "n2", "n3"}))
    record.untouched.clear()
    actions = core.tick(100_000, {"ctl": ctl.nodes["n4"]}, {"pb": node})
    assert node.recovering and actions.events == ["lost_store_to_holders"]
    assert actions.proposals == [("ctl", encode_election("pb", record.groups["pb"], "n0", {"n0", "n2", "n3"}))]
