"""The group id: what a Raft group's stores record as their identity and name at HELLO. A CONFIG entry
carries it (its codec, with and without it); a node that joins takes it from the CONFIG entry that adds it
(or from the base configuration of a RESET) and records none of its own before; the id never changes
with the members; a store of another group refuses it; stores of the previous version are converted."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumlog.config import StoreConfig
from quorumlog.entry import MAGIC_CONFIG
from quorumlog.errors import ConfigError, ResponseCode
from quorumlog.raft.member import members_digest
from quorumlog.raft.membership import (
    FORMAT,
    FORMAT_GROUP_ID,
    Membership,
    MembershipError,
    carried_group_id,
)
from quorumlog.raft.node import RaftNode
from quorumlog.sim.script import SCRIPT_RAFT, Script
from quorumlog.store.memory import MemoryStore

OK = int(ResponseCode.SUCCESS)
MEMBERS = ["n0", "n1", "n2"]
GROUP_ID = members_digest("g0", MEMBERS)  # the id of g0 bootstrapped by n0..n2
ELECTION_MS = SCRIPT_RAFT.election_timeout_ms + SCRIPT_RAFT.election_backoff_ms


# -- the CONFIG codec ---------------------------------------------------------------------------------
@st.composite
def memberships(draw: st.DrawFn) -> Membership:
    ids = draw(st.lists(st.sampled_from([f"n{i}" for i in range(8)]), min_size=1, max_size=6, unique=True))
    k = draw(st.integers(1, len(ids)))
    addresses = {i: f"h{i}:{draw(st.integers(1, 65535))}" for i in ids if draw(st.booleans())}
    return Membership.of(ids[:k], ids[k:], addresses)


group_ids = st.text(st.characters(blacklist_characters="=\x00\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
                                  blacklist_categories=("Cs",)), min_size=1, max_size=64)


@given(memberships(), group_ids)
def test_a_configuration_and_its_group_id_survive_the_codec(m: Membership, group_id: str) -> None:
    body = m.encode(group_id)
    assert Membership.decode_with_id(body) == (m, group_id)
    assert Membership.decode(body) == m  # (what the controller record and the simulator's checker read)
    assert msgpack.unpackb(body)[0] == FORMAT_GROUP_ID


@given(memberships())
def test_a_body_without_the_group_id_is_the_previous_layout_and_decodes_to_none(m: Membership) -> None:
    body = m.encode()
    # Byte for byte what the previous version wrote (and what it still reads).
    assert body == msgpack.packb([FORMAT, sorted(m.voters), sorted(m.learners), dict(m.addresses)])
    assert Membership.decode_with_id(body) == (m, None)


@pytest.mark.parametrize("body, why", [
    (msgpack.packb([1, ["a"], [], {}, GROUP_ID]), "another layout"),  # FORMAT 1 has four fields
    (msgpack.packb([2, ["a"], [], {}]), "another layout"),  # FORMAT 2 has five
    (msgpack.packb([3, ["a"], [], {}, GROUP_ID]), "another layout"),
    (msgpack.packb([True, ["a"], [], {}]), "another layout"),
    (msgpack.packb([2, ["a"], [], {}, ""]), "invalid group id"),
    (msgpack.packb([2, ["a"], [], {}, 7]), "invalid group id"),
    (msgpack.packb([2, ["a"], [], {}, "a=b"]), "invalid group id"),
    (msgpack.packb([2, ["a"], [], {}, "two\nlines"]), "invalid group id"),
    (msgpack.packb([2, ["a"], [], {}, "x" * 65]), "invalid group id"),
    (msgpack.packb([2, [], [], {}, GROUP_ID]), "at least one voter"),
], ids=["format-1-with-id", "format-2-without", "format-3", "format-true", "empty-id", "int-id", "id-with-=",
        "two-line-id", "id-too-long", "no-voter"])
def test_malformed_bodies_with_a_group_id_are_refused(body: bytes, why: str) -> None:
    with pytest.raises(MembershipError, match=why):
        Membership.decode_with_id(body)


def test_an_invalid_group_id_is_not_encoded() -> None:
    with pytest.raises(MembershipError, match="invalid group id"):
        Membership.of(["a"]).encode("a=b")


def test_the_newest_entry_that_carries_an_id_names_the_group() -> None:
    m = Membership.of(MEMBERS)
    assert carried_group_id(()) is None
    assert carried_group_id([(3, 1, m.encode())]) is None
    configs = [(3, 1, m.encode("old")), (5, 2, m.encode("new")), (7, 2, m.encode()), (8, 2, b"\xc1")]
    assert carried_group_id(configs) == "new"


# -- in the core ----------------------------------------------------------------------------------------
def grown(spares: int = 1, stores: dict[str, MemoryStore] | None = None, wipe_spares: bool = True) -> Script:
    """n0..n2, a group led by n0, and `spares` more nodes started to join it (join = true). With
    `wipe_spares` their stores are pristine, as a new node's are (the script records an identity for
    every store, as the previous version did)."""
    ids = MEMBERS + [f"n{3 + i}" for i in range(spares)]
    s = Script(ids, config=replace(SCRIPT_RAFT), members=MEMBERS, stores=dict(stores or {}))
    if wipe_spares:
        for spare in ids[3:]:
            s.wipe(spare)
    s.elect("n0")
    s.run(200)
    assert s.leader() == "n0"
    return s


def test_a_joining_node_records_the_group_id_of_the_config_entry_that_adds_it() -> None:
    s = grown()
    n3 = s.nodes["n3"]
    s.run(300)  # n3 probes, finds the group, and waits as a learner: it names no group id meanwhile
    assert n3.stats["joined_existing_group"] == 1
    assert n3.group_id is None and s.stores["n3"].identity is None
    n3 = s.restart("n3")  # its decision is durable all the same: no second probe, still no id
    assert not n3.joining and n3.group_id is None
    for k in range(3):
        s.propose("n0", [f"e{k}".encode()])
    rid = s.change("n0", lambda m: m.with_learner("n3", "127.0.0.1:9003"))
    s.run(300)
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    # The entry that added n3 carries the group's id: n3 took it, not a digest of its own member list.
    assert Membership.decode_with_id(s.stores["n0"].configs[-1][2])[1] == GROUP_ID
    assert n3.group_id == GROUP_ID and s.stores["n3"].identity == GROUP_ID
    assert members_digest("g0", [*MEMBERS, "n3"]) != GROUP_ID  # (what the previous version recorded)
    # The id stays what the group was created with, whatever its members become; so does each store's.
    rid = s.change("n0", lambda m: m.promoted("n3"))
    s.run(300)
    rid = s.change("n0", lambda m: m.without("n1"))
    s.run(300)
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    assert s.nodes["n0"].member.config.voters == {"n0", "n2", "n3"}
    for i in s.ids:
        assert s.nodes[i].group_id == GROUP_ID and s.stores[i].identity == GROUP_ID, i
    assert {Membership.decode_with_id(c[2])[1] for c in s.stores["n0"].configs} == {GROUP_ID}
    # Started again, every node keeps it (and the one that joined needs no probe).
    for i in s.ids:
        assert s.restart(i).group_id == GROUP_ID and not s.nodes[i].joining


SMALL = StoreConfig(data_segment_bytes=4096, index_segment_bytes=32 * 64, max_body_bytes=1024,
                    file_reserved_hours=0)


def test_a_joining_node_reset_past_the_config_entry_takes_the_id_from_the_base_configuration() -> None:
    """The entry that added n3 expired before n3 received it: the leader RESETs n3 to its begin, with the
    configuration in force there (the base), which carries the id."""
    s = grown(stores={i: MemoryStore(SMALL) for i in [*MEMBERS, "n3"]})
    away = lambda m: "n3" in (m.sender, m.target)  # noqa: E731
    rid = s.change("n0", lambda m: m.with_learner("n3", "127.0.0.1:9003"))
    s.settle(drop=away)
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    for k in range(8):
        s.propose("n0", [b"%d-%d" % (k, i) + b"." * 200 for i in range(10)])
        s.settle(drop=away)
    leader = s.stores["n0"]
    assert leader.expire(leader.committed_index, 0.0) > 0
    assert leader.configs[0][0] < leader.begin_index  # the change is the base configuration now
    assert s.stores["n3"].identity is None
    s.run(4 * ELECTION_MS)
    n3 = s.nodes["n3"]
    assert n3.stats["log_resets"] >= 1 and s.stores["n3"].begin_index == leader.begin_index
    assert n3.group_id == GROUP_ID and s.stores["n3"].identity == GROUP_ID


def test_a_store_of_the_previous_version_that_joined_is_converted() -> None:
    """The previous version recorded, for a node that joined, the digest of its own configured list (the
    members and itself): the wrong id. Such a store names none, and takes the group's from the next CONFIG
    entry that carries it."""
    s = grown(wipe_spares=False)  # (the script records that digest, as the previous version did)
    legacy = members_digest("g0", [*MEMBERS, "n3"])
    assert s.stores["n3"].identity == legacy and s.nodes["n3"].group_id is None
    s.change("n0", lambda m: m.with_learner("n3", "127.0.0.1:9003"))
    s.run(300)
    assert s.nodes["n3"].group_id == GROUP_ID and s.stores["n3"].identity == GROUP_ID


def test_a_wiped_founding_member_takes_the_id_from_the_log_or_its_list() -> None:
    """A founding member on an empty disk names, while it probes, the id it would create the group with;
    once it finds the group existing it names none until the log says: a CONFIG entry's id, or, when the
    log holds no change, its list's digest once it holds the log up to a leader's end."""
    s = grown(spares=0)
    s.propose("n0", [b"x"])
    s.run(300)
    n2 = s.wipe("n2")
    assert n2.joining and n2.group_id == GROUP_ID and s.stores["n2"].identity is None
    s.run(4 * ELECTION_MS)
    assert n2.stats["joined_existing_group"] == 1 and not n2.recovering
    assert n2.group_id == GROUP_ID and s.stores["n2"].identity == GROUP_ID

    s = grown()
    s.change("n0", lambda m: m.with_learner("n3", "127.0.0.1:9003"))
    s.run(300)
    n1 = s.wipe("n1")
    s.tick("n1")
    s.deliver()  # (the probes)
    s.deliver()  # (their answers: the group exists)
    assert n1.stats["joined_existing_group"] == 1 and n1.group_id is None and s.stores["n1"].identity is None
    s.run(4 * ELECTION_MS)
    assert n1.group_id == GROUP_ID and s.stores["n1"].identity == GROUP_ID


def test_a_store_of_another_group_refuses_the_config_entry_and_takes_no_part() -> None:
    """n3's store records another group's id (a node of another cluster's g0, configured with this one's
    addresses). The CONFIG entry that adds it carries this group's id: n3 raises ConfigError, applies
    nothing more, neither votes nor answers, and its store does not open again; the group goes on."""
    other = members_digest("g0", ["n0", "n1", "n2", "n3", "n4"])
    foreign = MemoryStore()
    foreign.set_identity(other)
    s = grown(stores={"n3": foreign}, wipe_spares=False)
    n3 = s.nodes["n3"]
    assert n3.group_id == other  # (not the digest of n3's list: trusted as recorded)
    s.change("n0", lambda m: m.with_learner("n3", "127.0.0.1:9003"))
    with pytest.raises(ConfigError, match=f"records group id {other}, but .* carries group id {GROUP_ID}"):
        s.run(300)
    assert n3.foreign_group_id == GROUP_ID and foreign.identity == other  # not overwritten
    assert not n3.can_vote() and not n3.can_lead()
    assert n3.member.config is n3.member.bootstrap  # the other group's configuration is not applied
    s.run(ELECTION_MS)  # (it drops every message now: nothing more is raised)
    assert n3.stats["rejected_foreign_group"] > 0
    before = s.stores["n0"].committed_index
    s.propose("n0", [b"goes on"])
    s.run(300)
    assert s.leader() == "n0" and s.stores["n0"].committed_index == before + 1
    with pytest.raises(ConfigError, match="two different groups of the same name"):
        RaftNode("n3", "g0", [*MEMBERS, "n3"], foreign, SCRIPT_RAFT, random.Random(0), joining=True)


def test_a_founding_member_refuses_a_store_whose_log_carries_another_id() -> None:
    store = MemoryStore()
    store.set_identity(GROUP_ID)
    store.append([Membership.of(MEMBERS).encode("0123456789abcdef")], 1, MAGIC_CONFIG)
    with pytest.raises(ConfigError, match="two different groups of the same name"):
        RaftNode("n0", "g0", MEMBERS, store, SCRIPT_RAFT, random.Random(0))


def _store_of_the_previous_version(identity: str) -> MemoryStore:
    """A store that recorded `identity` and holds a change written by the previous version (no id)."""
    store = MemoryStore()
    store.append([Membership.of(MEMBERS, addresses={"n0": "127.0.0.1:9000"}).encode()], 1, MAGIC_CONFIG)
    store.flush()
    store.save_vote(1, None)
    store.set_identity(identity)
    return store


def test_a_changed_group_of_the_previous_version_keeps_its_id_and_writes_it() -> None:
    """A founding member's store of the previous version records its first members' digest, and its log
    changes written without the id: that is the group id; it names it and the next change carries it."""
    s = Script(MEMBERS, stores={i: _store_of_the_previous_version(GROUP_ID) for i in MEMBERS})
    assert all(s.nodes[i].group_id == GROUP_ID for i in MEMBERS)
    s.elect("n0")
    s.run(300)
    rid = s.change("n0", lambda m: m.with_address("n1", "127.0.0.1:9001"))
    s.run(300)
    assert s.result("n0", rid).code == OK  # type: ignore[union-attr]
    assert carried_group_id(s.stores["n1"].configs) == GROUP_ID


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_a_store_that_only_took_a_term_while_probing_probes_again(kind: str, tmp_path: Any) -> None:
    """A pristine node takes a term from a vote request while it probes, and the term is written (FileStore:
    `currterm` alone), then it stops before deciding. Started again it is pristine still: it probes and
    cannot vote. Taken for a bootstrapped store (`identity` reads "" beside a `currterm`), it voted with an
    empty log, the wiped node's forgotten promises unchecked (the primary/backup simulator, seed 500936)."""
    from quorumlog.store.file_store import FileStore

    cfg = StoreConfig(data_segment_bytes=1 << 16, index_segment_bytes=1 << 16, max_body_bytes=1024)
    store = FileStore(str(tmp_path / "s"), cfg) if kind == "file" else MemoryStore()
    store.save_vote(4, None)
    if kind == "file":
        store.close()
        store = FileStore(str(tmp_path / "s"), cfg)
        assert store.identity == ""  # (a currterm and no identity)
    node = RaftNode("n2", "g", ["n0", "n1", "n2"], store, SCRIPT_RAFT, random.Random(1))
    assert node.joining and not node.can_vote() and node.member.term == 4
    store.close()
