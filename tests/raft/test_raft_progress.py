"""A follower's Progress in the leader (progress.py): its transitions, and the ones it refuses."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from quorumlog.raft.progress import Progress, ProgressError, State


def appending(next_index: int = 5) -> Progress:
    pr = Progress(next_index - 1)
    pr.become_append(next_index)
    return pr


def test_progress_compare_truncate_append() -> None:
    pr = Progress(9)
    assert pr.is_comparing and pr.compare_index == 9 and pr.match == -1
    pr.wait_control(100)
    assert not pr.control_due(150, 100) and pr.control_due(200, 100)
    pr.control_answered()
    assert pr.control_due(150, 100)
    # A mismatch at 9 is remembered through the round; a later, lower one lowers it.
    pr.on_mismatch()
    pr.compare_at(6)
    pr.on_mismatch()
    pr.compare_at(4)
    assert pr.mismatch_at == 6 and pr.compare_index == 4
    assert pr.on_match(4) and not pr.on_match(3) and pr.match == 4
    pr.become_truncate()
    assert pr.is_truncating and pr.truncate_index == 4
    pr.become_append(pr.truncate_index + 1)
    assert pr.is_appending and pr.next_index == 5 and not pr.inflight


def test_progress_pushes_acks_and_rewind() -> None:
    pr = appending(5)
    pr.sent_push(7, now=10)
    pr.sent_push(9, now=20)
    pr.sent_push(12, now=30)
    assert list(pr.inflight) == [5, 8, 10] and pr.next_index == 13
    # The ack of a later push also completes those below it, whose own acks were lost.
    assert pr.on_append_acked(8, 9)
    assert pr.match == 9 and list(pr.inflight) == [10]
    assert not pr.on_append_acked(5, 7)  # a late ack below the watermark changes nothing
    assert not pr.push_timed_out(129, 100) and pr.push_timed_out(130, 100)
    pr.rewind()
    assert pr.next_index == 10 and not pr.inflight


def test_progress_reset_then_append_or_compare() -> None:
    pr = Progress(3)
    pr.become_reset(now=50)
    assert pr.is_resetting and not pr.control_due(60, 100)
    pr.become_reset(now=150)  # unanswered: sent again
    pr.control_answered()
    pr.on_reset_acked(19)
    assert pr.match == 19
    pr.become_append(20)
    assert pr.is_appending and pr.next_index == 20
    # From any state, a compare round starts clean.
    pr.sent_push(25, now=200)
    pr.become_compare(21)
    assert pr.state is State.COMPARE and pr.compare_index == 21
    assert not pr.inflight and pr.mismatch_at is None and pr.control_sent_ms is None


def test_progress_lost_entries_lower_the_watermark() -> None:
    pr = appending(5)
    pr.sent_push(9, now=0)
    pr.on_append_acked(5, 9)
    pr.lower_match(2)
    assert pr.match == 2
    with pytest.raises(ProgressError):
        pr.lower_match(2)  # not below the watermark: nothing was lost


@pytest.mark.parametrize("illegal", [
    lambda pr: pr.become_truncate(),
    lambda pr: pr.become_append(9),
    lambda pr: pr.become_reset(0),
    lambda pr: pr.compare_at(3),
    lambda pr: pr.on_mismatch(),
    lambda pr: pr.on_reset_acked(3),
], ids=["truncate", "append", "reset", "compare_at", "mismatch", "reset_acked"])
def test_progress_refuses_transitions_out_of_append(illegal: Callable[[Progress], object]) -> None:
    pr = appending(5)
    pr.sent_push(6, now=0)
    with pytest.raises(ProgressError, match="refused in APPEND"):
        illegal(pr)
    assert pr.is_appending and pr.next_index == 7 and list(pr.inflight) == [5]  # left as it was


def test_progress_refuses_pushes_and_rewinds_outside_append() -> None:
    pr = Progress(4)
    with pytest.raises(ProgressError):
        pr.sent_push(6, now=0)
    with pytest.raises(ProgressError):
        pr.rewind()
    with pytest.raises(ProgressError):
        pr.become_append(-1)
    pr.become_truncate()
    with pytest.raises(ProgressError):
        pr.become_truncate()
    assert pr.is_truncating and not pr.inflight
