"""The controller's record (RocketMQ 5's controller mode): for every primary/backup group a controller group
controls, the epoch, its primary and its in-sync set (SyncStateSet), built by applying the controller
group's committed log in order. Pure: no I/O, no clock (server/controller.py and the simulator drive it).

Every command is conditional (an election names the epoch it replaces and the record version it was made
from, an in-sync change the version, so a late duplicate of an old change cannot undo a newer one) and is
applied by every replica in log order, so replicas that proposed concurrently, twice, or from a stale view
cannot disagree: a command whose condition fails is a no-op. Commands are entry bodies of the controller
group: PREFIX + msgpack [kind, group, prev, epoch, primary, in-sync set(, version(, flags))]. A hand-off
request names the asking primary's epoch and the backup it asks for (or none, withdrawn) in place of the
set. An election's flag TAKES says its primary records its takeover (a TAKE command) before it commits
anything, so an epoch never taken acknowledged nothing, and the primary of the last epoch taken (`holder`)
holds every acknowledged entry. Elections of the forms written before versions and takeovers existed are
refused, as are names outside the group's members: anyone who may append to the controller group could
forge one (only peers may: server/node.py).

**Snapshots: the record never depends on how much of the log remains.** The controller group's log
expires like any other. A replica whose log now starts after the point it applied (a restart after
expiry, a log reset by its leader) cannot rebuild the record from commands alone: a conditional command
would meet the defaults instead of the record it was made from, and the replica would diverge. So the
controller group's leader appends SNAPSHOT entries: the whole record, every field and version, `as_of`
the log end it was computed at. A snapshot counts only at index as_of + 1 (written right after the entries
it sums up; one that lost a race with another entry is ignored by every replica alike). A replica that is
`whole` (it applied every entry from the log's first) replaces its record with the snapshot, which equals
it; one that is not whole applies nothing until it meets a snapshot, then is whole from there. Expiry keeps
the last snapshot (`expiry_cap`): every replica's log holds one, or holds everything from index 0.

**Members follow the controller group's configuration.** A primary/backup group has exactly its controller
group's members, so a change of members is a Raft change of the controller group (a CONFIG entry,
raft/membership.py): the record applies each committed CONFIG entry in log order, as every replica does,
and every group it controls then has the configuration's voters and learners as members. A member removed
leaves every in-sync set (a new version, so a command made from the view before is void); commands naming
a non-member are refused from there on. Snapshots carry the members.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import msgpack

from ..entry import MAGIC_CONFIG
from ..raft.membership import Membership, MembershipError
from ..store.base import LogStore

PREFIX = b"QLCTL1"
ELECT = "elect"
ISR = "isr"
HAND_OFF = "handoff"
TAKE = "take"
SNAPSHOT = "snap"
SYNC = "sync"  # no command: an entry that brings a restarted replica's commit up to date (controller.py)
TAKES = 1  # an election's flag: its primary records its takeover (the module docstring)
READ_BATCH = 1024


@dataclass(frozen=True, slots=True)
class Assignment:
    epoch: int
    primary: str
    isr: frozenset[str]
    version: int = 0  # commands applied to this group's record
    previous: str = ""  # the primary of the epoch before (the one the last election replaced)
    isr_seen: bool = True  # some backup was recorded in sync in this epoch (so an ack may have needed it)
    hand_off: str = ""  # the in-sync backup the primary (disk full, log damaged) asked to be elected in its place
    taken: bool = True  # the primary recorded its takeover: before, it committed nothing in this epoch
    # Who holds every acknowledged entry ("": unknown): the primary of the last epoch taken, or, while nobody
    # has been in sync in this epoch since its takeover, the holder from before it (what this epoch's primary
    # acknowledged alone is lost with its store whoever is chosen; seed 213973 of the simulator).
    holder: str = ""
    # The in-sync set the last epoch taken ended with (less the primaries elected since): they hold every
    # acknowledged entry too, so a holder that lost its store hands the epoch to one of them.
    holder_isr: frozenset[str] = frozenset()


def encode_command(kind: str, group: str, prev_epoch: int, epoch: int, primary: str, isr: set[str],
                   version: int | None = None, flags: int | None = None) -> bytes:
    fields = [kind, group, prev_epoch, epoch, primary, sorted(isr)]
    if version is not None:
        fields.append(version)
        if flags is not None:
            fields.append(flags)
    return PREFIX + msgpack.packb(fields)


def encode_election(group: str, a: Assignment, primary: str, isr: set[str]) -> bytes:
    """An election of `primary` in the epoch after `a`'s, made from `a`'s version of the record; its primary
    records its takeover."""
    return encode_command(ELECT, group, a.epoch, a.epoch + 1, primary, isr, a.version, TAKES)


def _row(group: str, a: Assignment, touched: bool, members: frozenset[str]) -> list[Any]:
    return [group, a.epoch, a.primary, sorted(a.isr), a.version, a.previous, a.isr_seen, a.hand_off, a.taken,
            a.holder, touched, sorted(a.holder_isr), sorted(members)]


def _assignment(row: list[Any]) -> tuple[str, Assignment, bool, frozenset[str] | None] | None:
    """A snapshot's row back (members None in a row written before they were kept), or None when it has the
    wrong shape."""
    if len(row) not in (12, 13):
        return None
    group, epoch, primary, isr, version, previous, isr_seen, hand_off, taken, holder, touched, holder_isr = row[:12]
    members = row[12] if len(row) == 13 else []
    if not (isinstance(group, str) and type(epoch) is int and isinstance(primary, str) and isinstance(isr, list)
            and isinstance(holder_isr, list) and isinstance(members, list)
            and all(isinstance(m, str) for m in isr + holder_isr + members) and type(version) is int
            and isinstance(previous, str) and type(isr_seen) is bool and isinstance(hand_off, str)
            and type(taken) is bool and isinstance(holder, str) and type(touched) is bool):
        return None
    return group, Assignment(epoch, primary, frozenset(isr), version, previous, isr_seen, hand_off, taken,
                             holder, frozenset(holder_isr)), touched, frozenset(members) if len(row) == 13 else None


class ControllerState:
    """The record of one controller group: group -> Assignment, built by applying its commands."""

    def __init__(self, defaults: dict[str, Assignment]) -> None:
        """`defaults`: each group's record before any command, naming every member (primary and in sync)."""
        self.groups = dict(defaults)
        self.untouched = set(defaults)  # no command applied yet (the defaults stand)
        self.members = {g: frozenset({a.primary, *a.isr}) for g, a in defaults.items()}
        self.applied = -1  # the last log index applied (or skipped)
        self.whole = True  # every entry from the log's first was applied (else: waiting for a snapshot)
        self.snapshot_index = -1  # the last snapshot applied
        self.since_snapshot = 0  # entries applied after it (the leader writes another: controller_core.py)
        self.rebuilt = 0  # times a snapshot made the record whole again (its log had started after it)

    def add_default(self, group: str, a: Assignment) -> None:
        """A group this replica's config names, before any command: its defaults stand until one applies."""
        if group not in self.groups:
            self.groups[group] = a
            self.untouched.add(group)
            self.members[group] = frozenset({a.primary, *a.isr})

    def encode(self) -> bytes:
        """The whole record as one deterministic byte string (a snapshot's payload; replicas compare equal)."""
        return msgpack.packb([_row(g, self.groups[g], g not in self.untouched, self.members[g])
                              for g in sorted(self.groups)])

    def snapshot(self) -> bytes:
        """A SNAPSHOT command of the record as applied: valid only as the entry right after `applied`."""
        return PREFIX + msgpack.packb([SNAPSHOT, self.applied, msgpack.unpackb(self.encode())])

    def expiry_cap(self) -> int:
        """The last index expiry may drop: everything before the last snapshot applied (none: nothing)."""
        return self.snapshot_index - 1

    def catch_up(self, store: LogStore) -> set[str]:
        """Apply what `store` committed past `applied`; the groups whose record changed. A log that now
        starts past `applied` (expired, or reset) leaves the record not whole until a snapshot."""
        changed: set[str] = set()
        start = self.applied + 1
        if start < store.begin_index:
            self.whole = False
            start = store.begin_index
        committed = store.committed_index
        while start <= committed:
            entries = store.read(start, READ_BATCH, 1 << 20, include_control=True)
            if not entries:
                break
            for e in entries:
                if e.index > committed:
                    break
                if not e.is_control:
                    g = self.apply(e.body, e.index)
                    if g is not None:
                        changed.add(g)
                elif e.magic == MAGIC_CONFIG:
                    changed |= self.apply_config(e.body)
                start = e.index + 1
        self.applied = start - 1
        return changed

    def apply_config(self, body: bytes) -> set[str]:
        """A CONFIG entry of the controller group: its members become every controlled group's; the groups
        whose record changed (a member removed from an in-sync set)."""
        if self.whole:
            self.since_snapshot += 1
        if not self.whole:
            return set()
        try:
            config = Membership.decode(body)
        except MembershipError:
            return set()  # (the Raft core refuses such an entry before it is appended: never met here)
        members = frozenset(config.members)
        changed = set()
        for group, a in self.groups.items():
            self.members[group] = members
            gone = (a.isr | a.holder_isr) - members
            if gone:
                self.groups[group] = replace(a, isr=a.isr - gone, holder_isr=a.holder_isr - gone,
                                             version=a.version + 1)
                self.untouched.discard(group)
                changed.add(group)
        return changed

    def apply(self, body: bytes, index: int = -1) -> str | None:
        """Apply the entry at `index`; the group it changed ("*" for a snapshot), or None (not a command,
        its condition failed, or the record is not whole yet)."""
        if self.whole:
            self.since_snapshot += 1
        if not body.startswith(PREFIX):
            return None
        try:
            kind, *fields = msgpack.unpackb(body[len(PREFIX):])
        except (ValueError, TypeError, msgpack.UnpackException):
            return None
        if kind == SNAPSHOT:
            return self._apply_snapshot(fields, index)
        if not self.whole:
            return None
        # Anything with append rights on the controller group can write here: a body of the wrong shape is
        # no command (raising would stop every node applying the record at this entry, for good).
        if not 5 <= len(fields) <= 7:
            return None
        group, prev, epoch, primary, isr, *more = fields
        version = more[0] if more else None
        flags = more[1] if len(more) == 2 else 0
        if not (isinstance(kind, str) and isinstance(group, str) and isinstance(primary, str)
                and type(prev) is int and type(epoch) is int and type(version) in (int, type(None))
                and type(flags) is int and isinstance(isr, list) and all(isinstance(m, str) for m in isr)):
            return None
        cur = self.groups.get(group)
        if cur is None or kind not in (ELECT, ISR, HAND_OFF, TAKE):
            return None
        # Anyone who may append here could write any command: names outside the group's members, and
        # elections of the old forms (no version; no takeover, which made their primary the holder of every
        # acknowledged entry), are refused (issue 34: a forged election made any member primary).
        members = self.members[group]
        if primary not in members or not set(isr) <= members:
            return None
        if kind == ELECT and (version is None or not flags & TAKES):
            return None
        if kind in (HAND_OFF, TAKE):  # from the epoch's primary
            if cur.epoch != epoch or cur.primary != primary:
                return None
            # A hand-off request: the latest stands, the record is unchanged. A takeover changes the version:
            # an election made from a view without it must not hand the epoch back (controller.py, _vouched).
            # A takeover: from here on the primary commits, and an acknowledgement may need a backup recorded
            # in sync from here on, not before (the simulator's seed 205084: a takeover recorded after its
            # primary's disk was lost, with nobody in sync since, left the epoch to the operator, though no
            # acknowledgement could have been given in it).
            self.groups[group] = replace(cur, hand_off=isr[0] if isr else "") if kind == HAND_OFF else \
                replace(cur, taken=True, holder=primary if cur.isr else cur.holder, version=cur.version + 1,
                        isr_seen=bool(cur.isr))
            self.untouched.discard(group)
            return group
        elected = kind == ELECT and cur.epoch == prev and epoch == prev + 1 and version == cur.version
        changed = kind == ISR and cur.version == prev and cur.epoch == epoch and cur.primary == primary
        if not (elected or changed):
            return None
        rest = frozenset(isr) - {primary}
        if elected:  # (its primary records its takeover: until then the epoch acknowledged nothing)
            # Of an epoch taken, its final in-sync set; else the one before, less the primary replaced (a
            # member elected and lost since is no heir: the set shrinks, never cycles).
            # An epoch taken in which nobody was ever in sync acknowledged only what its primary alone held
            # (lost with it, whoever is chosen), and its holder from before the takeover holds every other
            # entry (epochs.hand_back_to): that one is the heir, should the primary elected now lose its store
            # before it takes the epoch (the simulator's seed 500963: a primary re-elected after a restart
            # lost its disk, and the record named nobody else).
            if cur.taken:
                heirs = cur.isr if cur.isr_seen else frozenset({cur.holder}) - {"", cur.primary}
            else:
                heirs = cur.holder_isr - {cur.primary}
            a = Assignment(epoch, primary, rest, cur.version + 1, cur.primary, bool(rest), "", False,
                           cur.primary if cur.taken else cur.holder, heirs)
        else:
            # A backup in sync after the takeover: acknowledgements may need it from here on, and the primary
            # holds every entry (an epoch not taken yet acknowledged nothing: its holder stays).
            a = replace(cur, isr=rest, version=cur.version + 1, isr_seen=cur.isr_seen or bool(rest),
                        holder=cur.primary if cur.taken and rest else cur.holder)
        self.groups[group] = a
        self.untouched.discard(group)
        return group

    def _apply_snapshot(self, fields: list[Any], index: int) -> str | None:
        if len(fields) != 2 or type(fields[0]) is not int or not isinstance(fields[1], list):
            return None
        as_of, rows = fields
        if index != as_of + 1:  # not written right after what it sums up: every replica ignores it
            return None
        parsed = [_assignment(r) if isinstance(r, list) else None for r in rows]
        if not all(parsed):
            return None
        for p in parsed:
            assert p is not None
            group, a, touched, members = p
            self.groups[group] = a
            if members is not None:
                self.members[group] = members
            if touched:
                self.untouched.discard(group)
            else:
                self.untouched.add(group)
        self.rebuilt += not self.whole
        self.whole = True
        self.snapshot_index = index
        self.since_snapshot = 0
        return "*"
