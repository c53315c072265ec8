"""The client's producer window (client/producer.py): sequences within the window, waiters woken in turn."""

from __future__ import annotations

import asyncio
import random

import pytest

from quorumlog.client.producer import Producer


def _producer(window: int) -> Producer:
    return Producer(7, window, random.Random(1))


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_sequences_are_consecutive_within_the_window() -> None:
    async def main() -> None:
        p = _producer(4)
        keys = [await p.take() for _ in range(4)]
        assert keys == [(7, 0), (7, 1), (7, 2), (7, 3)]

    asyncio.run(main())


def test_a_full_window_waits_until_the_oldest_is_answered() -> None:
    async def main() -> None:
        p = _producer(2)
        await p.take()
        await p.take()
        third = asyncio.ensure_future(p.take())
        await _settle()
        assert not third.done()
        await p.release(7, 1)  # not the oldest: the window is still full
        await _settle()
        assert not third.done()
        await p.release(7, 0)
        assert await asyncio.wait_for(third, 1) == (7, 2)

    asyncio.run(main())


def test_many_tasks_share_a_small_window_in_order() -> None:
    async def main() -> None:
        p = _producer(3)
        rng = random.Random(5)
        outstanding: list[int] = []
        taken: list[int] = []
        most = 0

        async def one() -> None:
            nonlocal most
            _pid, seq = await p.take()
            taken.append(seq)
            outstanding.append(seq)
            most = max(most, max(outstanding) - min(outstanding) + 1)
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
            outstanding.remove(seq)
            await p.release(7, seq)

        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(40))), 5)
        assert sorted(taken) == list(range(40))
        assert most <= 3  # never a sequence further than the window from the oldest unanswered

    asyncio.run(main())


def test_a_held_request_stops_new_ones_until_it_is_answered() -> None:
    async def main() -> None:
        p = _producer(8)
        await p.take()
        await p.take()
        p.hold(7, 1)  # refused as out of order: no new sequence until it went again and was answered
        blocked = asyncio.ensure_future(p.take())
        await _settle()
        assert not blocked.done()
        await p.release(7, 1)
        assert await asyncio.wait_for(blocked, 1) == (7, 2)

    asyncio.run(main())


@pytest.mark.parametrize("answered", [True, False])
def test_earlier_answered_is_woken_by_the_earlier_release(answered: bool) -> None:
    async def main() -> None:
        p = _producer(8)
        await p.take()
        await p.take()
        loop = asyncio.get_running_loop()
        waiting = asyncio.ensure_future(p.earlier_answered(7, 1, loop.time() + (5 if answered else 0.05)))
        await _settle()
        assert not waiting.done()
        if answered:
            await p.release(7, 0)
        assert await asyncio.wait_for(waiting, 2) is answered

    asyncio.run(main())


def test_a_retired_id_starts_a_new_window() -> None:
    async def main() -> None:
        p = Producer(None, 1, random.Random(3))
        old = p.id
        await p.take()
        waiting = asyncio.ensure_future(p.take())
        await _settle()
        assert not waiting.done()
        p.retire(old)
        await p.release(old, 0)
        producer, seq = await asyncio.wait_for(waiting, 1)
        assert producer == p.id != old and seq == 0

    asyncio.run(main())
