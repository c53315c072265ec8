"""The configuration a CONFIG entry holds (raft/membership.py): its codec, its rules, and the
single-server step between two configurations."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumlog.raft.membership import Membership, MembershipError, single_server_step

ids = st.text(alphabet="abcdefghn0123456789-", min_size=1, max_size=8)


@st.composite
def memberships(draw: st.DrawFn) -> Membership:
    members = draw(st.lists(ids, min_size=1, max_size=7, unique=True))
    n_voters = draw(st.integers(1, len(members)))
    addressed = draw(st.lists(st.sampled_from(members), unique=True))
    return Membership.of(members[:n_voters], members[n_voters:], {m: f"10.0.0.{i}:90{i:02d}"
                                                                  for i, m in enumerate(addressed)})


@given(memberships())
def test_a_configuration_survives_its_codec(m: Membership) -> None:
    assert Membership.decode(m.encode()) == m
    assert m.majority == len(m.voters) // 2 + 1 and m.members == sorted(m.voters | m.learners)


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_a_membership_error(data: bytes) -> None:
    with contextlib.suppress(MembershipError):
        Membership.decode(data)


@pytest.mark.parametrize("body, why", [
    (msgpack.packb([2, ["a"], [], {}]), "another layout"),
    (msgpack.packb([1, [], [], {}]), "at least one voter"),
    (msgpack.packb([1, ["a", "a"], [], {}]), "twice"),
    (msgpack.packb([1, ["a"], ["a"], {}]), "both voter and learner"),
    (msgpack.packb([1, ["a"], [], {"b": "h:1"}]), "must name members"),
    (msgpack.packb([1, ["a"], [], {"a": "nohostport"}]), "host:port"),
    (msgpack.packb([1, ["client:x"], [], {}]), "invalid member id"),
    (msgpack.packb([1, ["*"], [], {}]), "invalid member id"),
    (b"\xc1", "does not decode"),
    (msgpack.packb([1, [["a"]], [], {}]), "not strings"),
    (msgpack.packb([1, ["a"], [], {b"a": "h:1"}]), "not strings"),
    (msgpack.packb([1, ["a"], [], {"a": 7}]), "not strings"),
])
def test_malformed_configurations_are_refused_with_the_reason(body: bytes, why: str) -> None:
    with pytest.raises(MembershipError, match=why):
        Membership.decode(body)


def test_changes_and_their_refusals() -> None:
    m = Membership.of(["n0", "n1", "n2"], addresses={"n0": "h:1", "n1": "h:2", "n2": "h:3"})
    grown = m.with_learner("n3", "h:4")
    assert grown.learners == {"n3"} and grown.address("n3") == "h:4" and grown.majority == 2
    assert grown.promoted("n3").voters == {"n0", "n1", "n2", "n3"} and grown.promoted("n3").majority == 3
    assert m.without("n1").voters == {"n0", "n2"} and m.without("n1").address("n1") is None
    assert m.with_address("n2", "h:9").address("n2") == "h:9"
    for change, why in [(lambda: m.with_learner("n1"), "a voter already"),
                        (lambda: m.promoted("n1"), "a voter already"),
                        (lambda: m.promoted("n7"), "not a member"),
                        (lambda: m.without("n7"), "not a member"),
                        (lambda: Membership.of(["n0"]).without("n0"), "only voter"),
                        (lambda: m.with_address("n7", "h:1"), "not a member")]:
        with pytest.raises(MembershipError, match=why):
            change()


def test_single_server_steps() -> None:
    three = Membership.of(["a", "b", "c"])
    learner = three.with_learner("d")
    assert single_server_step(three, learner) is None
    assert single_server_step(learner, learner.promoted("d")) is None
    assert single_server_step(three, three.without("c")) is None
    assert single_server_step(three, Membership.of(["a", "b", "c", "d"])) == "d joins the voters only by promotion " \
                                                                         "of a learner"
    assert "one voter at a time" in (single_server_step(three, Membership.of(["a", "d", "e"], ["b"])) or "")
    assert "one voter at a time" in (single_server_step(learner, Membership.of(["a", "b", "d"])) or "")


@given(memberships(), st.data())
def test_every_change_is_a_single_server_step(m: Membership, data: st.DataObject) -> None:
    node = data.draw(st.sampled_from([*m.members, "fresh"]))
    for change in (lambda: m.with_learner(node), lambda: m.promoted(node), lambda: m.without(node),
                   lambda: m.with_address(node, "h:1")):
        try:
            nxt = change()
        except MembershipError:
            continue
        assert single_server_step(m, nxt) is None
        assert len(m.voters & nxt.voters) >= min(m.majority, nxt.majority)  # majorities overlap
