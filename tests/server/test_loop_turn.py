"""LoopTurn: a node's groups run at most one flush on the event loop per loop turn (server/flush.py)."""

from __future__ import annotations

import asyncio

from quorumlog.server.flush import LoopTurn


def test_one_flush_on_the_loop_per_turn() -> None:
    async def main() -> list[bool]:
        turn = LoopTurn()
        got = [turn.take(), turn.take()]  # a second group in the same turn goes to its worker thread
        await asyncio.sleep(0)  # the next turn
        got.append(turn.take())
        # Two callbacks of one later turn (as two connections' frames arriving in one poll): one takes it.
        loop = asyncio.get_running_loop()
        both = [loop.create_future(), loop.create_future()]
        for f in both:
            loop.call_soon(lambda f=f: f.set_result(turn.take()))
        got += [await both[0], await both[1]]
        return got

    assert asyncio.run(main()) == [True, False, True, True, False]
