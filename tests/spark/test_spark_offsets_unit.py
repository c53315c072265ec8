"""The pure offset maths: parsing, range splitting, rate limits, partition planning (plain unit tests and
properties)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumlog.spark.offsets import (
    EARLIEST,
    LATEST,
    available,
    even_split,
    min_trigger_ready,
    ordered,
    parse_offsets_spec,
    plan_partitions,
    rate_limit,
    resolve_offsets,
    split_range,
)
from quorumlog.spark.options import OptionError, parse_sink_options, parse_source_options
from quorumlog.spark.reader import MIN_DEFAULT_PIECE, make_partitions
from quorumlog.spark.view import GroupView, Replica


def test_parse_specs() -> None:
    assert parse_offsets_spec("earliest", "startingOffsets") == EARLIEST
    assert parse_offsets_spec(" Latest ", "startingOffsets") == LATEST
    assert parse_offsets_spec('{"g0": 42, "g1": -2}', "startingOffsets") == {"g0": 42, "g1": -2}
    for bad in ("soon", "[1]", "{}", '{"g0": -3}', '{"g0": "1"}', '{"g0": 1.5}', '{"g0": true}'):
        with pytest.raises(OptionError, match="startingOffsets"):
            parse_offsets_spec(bad, "startingOffsets")


def test_resolve() -> None:
    bounds = {"g0": (5, 100), "g1": (0, 7)}
    assert resolve_offsets(EARLIEST, ["g0", "g1"], bounds, "o", EARLIEST) == {"g0": 5, "g1": 0}
    assert resolve_offsets(LATEST, ["g0", "g1"], bounds, "o", EARLIEST) == {"g0": 100, "g1": 7}
    assert resolve_offsets({"g1": 3}, ["g0", "g1"], bounds, "o", LATEST) == {"g0": 100, "g1": 3}
    assert list(resolve_offsets({"g0": -1}, ["g1", "g0"], bounds, "o", EARLIEST)) == ["g1", "g0"]
    with pytest.raises(OptionError, match="'endingOffsets'.*'g9'"):
        resolve_offsets({"g9": 3}, ["g0"], bounds, "endingOffsets", LATEST)


def test_split_and_plan() -> None:
    assert split_range(0, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert split_range(3, 3, 4) == []
    assert split_range(0, 10, None) == [(0, 10)]
    # The largest piece is halved until there are enough.
    assert plan_partitions({"g0": (0, 10), "g1": (0, 2)}, None, 4) == [
        ("g0", 0, 2), ("g0", 2, 5), ("g0", 5, 10), ("g1", 0, 2)]
    assert plan_partitions({"g0": (0, 10), "g1": (20, 24)}, 4, None) == [
        ("g0", 0, 4), ("g0", 4, 8), ("g0", 8, 10), ("g1", 20, 24)]
    assert plan_partitions({"g0": (0, 1)}, None, 8) == [("g0", 0, 1)]  # a single index cannot split


def test_rate_limit_examples() -> None:
    # 300 waiting in g0 and 100 in g1, 100 admitted: 75 / 25 (Kafka's proportional split).
    assert rate_limit({"g0": 0, "g1": 0}, {"g0": 300, "g1": 100}, 100) == {"g0": 75, "g1": 25}
    assert rate_limit({"g0": 10, "g1": 0}, {"g0": 20, "g1": 5}, 100) == {"g0": 20, "g1": 5}
    # A group missing from start (new) is admitted nothing by this call; keys keep latest's order.
    assert list(rate_limit({"g1": 0}, {"g1": 5, "g0": 9}, 3)) == ["g1", "g0"]
    assert rate_limit({"g0": 0, "g1": 0, "g2": 0}, {"g0": 1, "g1": 1, "g2": 1}, 2) == {"g0": 1, "g1": 1, "g2": 0}


def test_min_trigger() -> None:
    assert not min_trigger_ready(0, None, 0, 0, 1000)
    assert min_trigger_ready(5, None, 0, 0, 1000)
    assert not min_trigger_ready(5, 10, 500, 0, 1000)
    assert min_trigger_ready(10, 10, 500, 0, 1000)
    assert min_trigger_ready(5, 10, 1000, 0, 1000)  # waited long enough: whatever there is


def test_ordered_keeps_a_fixed_key_order() -> None:
    assert list(ordered({"g1": 1, "g0": 2, "z": 3, "a": 4}, ["g0", "g1"])) == ["g0", "g1", "a", "z"]


groups_st = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=6)


@given(groups_st, st.integers(0, 3 * 10**6))
def test_rate_limit_properties(pairs: list[tuple[int, int]], limit: int) -> None:
    start = {f"g{i}": a for i, (a, _b) in enumerate(pairs)}
    latest = {f"g{i}": a + b for i, (a, b) in enumerate(pairs)}
    end = rate_limit(start, latest, limit)
    total = sum(b for _a, b in pairs)
    assert list(end) == list(latest)
    assert available(start, end) == min(limit, total)
    for g in latest:
        assert start[g] <= end[g] <= latest[g]
        if total > limit:
            exact = limit * (latest[g] - start[g]) / total
            assert abs((end[g] - start[g]) - exact) < 1


@given(st.dictionaries(st.sampled_from(["g0", "g1", "g2"]),
                       st.tuples(st.integers(0, 5000), st.integers(0, 5000)).map(lambda t: (min(t), max(t)))),
       st.one_of(st.none(), st.integers(1, 700)), st.one_of(st.none(), st.integers(1, 40)))
def test_plan_covers_every_index_once(ranges: dict[str, tuple[int, int]], max_per: int | None,
                                      min_parts: int | None) -> None:
    parts = plan_partitions(ranges, max_per, min_parts)
    for g, (lo, hi) in ranges.items():
        mine = [(a, b) for gg, a, b in parts if gg == g]
        covered = [i for a, b in mine for i in range(a, b)]
        assert covered == list(range(lo, hi))  # in order, each index once
        if max_per is not None:
            assert all(b - a <= max_per for a, b in mine)
        assert all(b > a for a, b in mine)
    wanted = sum(hi - lo for lo, hi in ranges.values())
    if min_parts is not None:
        assert len(parts) >= min(min_parts, wanted)


def test_source_options() -> None:
    o = parse_source_options({"ENDPOINTS": "127.0.0.1:1, 127.0.0.1:2", "groups": "g1,g0,g1",
                              "maxEntriesPerTrigger": "10", "readFrom": "ANY", "failOnDataLoss": "false",
                              "maxTriggerDelay": "30s"})
    assert o.endpoints == "127.0.0.1:1,127.0.0.1:2" and o.groups == ("g1", "g0")
    assert o.max_entries_per_trigger == 10 and o.read_from == "any" and not o.fail_on_data_loss
    assert o.max_trigger_delay_ms == 30_000
    base = {"endpoints": "127.0.0.1:1"}
    for name, value in [("endpoints", "nowhere"), ("maxEntriesPerTrigger", "0"), ("maxEntriesPerTrigger", "x"),
                        ("minEntriesPerTrigger", "-1"), ("maxEntriesPerPartition", "1.5"),
                        ("failOnDataLoss", "maybe"), ("readFrom", "follower"), ("startingOffsets", "soon"),
                        ("endingOffsets", '{"g0": "x"}'), ("groups", ","), ("maxTriggerDelay", "soon"),
                        ("requestTimeout", "-1")]:
        with pytest.raises(OptionError, match=f"^quorumlog option '{name}'"):
            parse_source_options({**base, name: value})
    with pytest.raises(OptionError, match="^quorumlog option 'endpoints': is required"):
        parse_source_options({})
    with pytest.raises(OptionError, match="minEntriesPerTrigger"):
        parse_source_options({**base, "maxEntriesPerTrigger": "5", "minEntriesPerTrigger": "6"})
    s = parse_sink_options({**base, "group": "g0", "maxBatchEntries": "10"})
    assert s.group == "g0" and s.max_batch_entries == 10
    with pytest.raises(OptionError, match="maxInFlight"):
        parse_sink_options({**base, "maxInFlight": "0"})


@given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(1, 50))
def test_even_split(start: int, n: int, pieces: int) -> None:
    parts = even_split(start, start + n, pieces)
    assert [i for a, b in parts for i in range(a, b)] == list(range(start, start + n))
    assert len(parts) == min(pieces, n) and all(b > a for a, b in parts)
    if parts:
        sizes = [b - a for a, b in parts]
        assert max(sizes) - min(sizes) <= 1


def _view(name: str, committed: tuple[int, ...], leader: int = 0) -> GroupView:
    return GroupView(name, tuple(Replica(f"n{i}", f"h:{i}", 0, c, i == leader) for i, c in enumerate(committed)))


def test_batch_partitions_default_to_replicas_times_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without partitioning options a batch query cuts each group into equal pieces, one per replica
    that has committed it (readFrom=any) per core; consecutive pieces go to different replicas."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    view = {"g0": _view("g0", (600_000, 600_000, 600_000)), "g1": _view("g1", (600_000, 600_000, 10), leader=1)}
    any_ = parse_source_options({"endpoints": "h:0", "readFrom": "any"})
    parts = make_partitions(any_, view, {"g0": 0, "g1": 0}, {"g0": 600_001, "g1": 600_001}, by_replicas=True)
    by_group = {g: [p.task for p in parts if p.task.group == g] for g in view}
    assert len(by_group["g0"]) == 6 and len(by_group["g1"]) == 4  # n2 of g1 has not committed the range
    assert {t.end - t.start for t in by_group["g0"]} == {100_000, 100_001}
    firsts = [p.task.nodes[0] for p in parts]
    assert all(a != b for a, b in zip(firsts, firsts[1:], strict=False))
    assert "h:2" not in {t.nodes[0] for t in by_group["g1"]}
    # The leader alone: one piece per core; a small range stays whole; options and streams as before.
    leader = parse_source_options({"endpoints": "h:0"})
    parts = make_partitions(leader, view, {"g0": 0}, {"g0": 600_001}, by_replicas=True)
    assert [p.task.nodes[0] for p in parts] == ["h:0", "h:0"]
    assert len(make_partitions(any_, view, {"g0": 0}, {"g0": MIN_DEFAULT_PIECE}, by_replicas=True)) == 1
    assert len(make_partitions(any_, view, {"g0": 0}, {"g0": 600_001})) == 1
    sized = parse_source_options({"endpoints": "h:0", "readFrom": "any", "maxEntriesPerPartition": "250000"})
    assert len(make_partitions(sized, view, {"g0": 0}, {"g0": 600_001}, by_replicas=True)) == 3


def test_read_from_followers_leaves_the_leader_as_the_last_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    followers = parse_source_options({"endpoints": "h:0", "readFrom": "followers"})
    view = {"g0": _view("g0", (600_000, 600_000, 600_000), leader=1)}
    parts = make_partitions(followers, view, {"g0": 0}, {"g0": 600_001}, by_replicas=True)
    assert len(parts) == 4  # two followers, two cores
    assert sorted(p.task.nodes[0] for p in parts) == ["h:0", "h:0", "h:2", "h:2"]
    assert all(p.task.nodes[2] == "h:1" for p in parts)
    # No follower has committed the range yet: the leader reads it.
    behind = {"g0": _view("g0", (10, 600_000, 10), leader=1)}
    parts = make_partitions(followers, behind, {"g0": 0}, {"g0": 600_001}, by_replicas=True)
    assert {p.task.nodes[0] for p in parts} == {"h:1"}
    # A stream's one partition per group goes to a follower as well.
    assert make_partitions(followers, view, {"g0": 0}, {"g0": 600_001})[0].task.nodes[0] in ("h:0", "h:2")
