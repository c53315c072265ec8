"""The client protocol against a real 3-node cluster, driven by Hypothesis' stateful testing: random
sequences of appends (single, batched, conditional with the right and a wrong expected end), gets and
reads, checked step by step against a model of the log. Each example starts where the log ends."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from quorumlog import Client
from quorumlog.errors import ExpectedEndMismatchError, InvalidArgumentError

BODIES = st.binary(min_size=0, max_size=300)


def _machine(client: Client) -> type[RuleBasedStateMachine]:
    class ClientProtocol(RuleBasedStateMachine):
        """The model: the bodies appended in this example, from index `start` on, in order."""

        @initialize()
        def start_at_the_end(self) -> None:
            self.start = client.append(b"example begins").index + 1
            self.model: list[bytes] = []

        @property
        def end(self) -> int:
            return self.start + len(self.model) - 1

        @rule(body=BODIES)
        def append(self, body: bytes) -> None:
            r = client.append(body)
            assert r.index == self.end + 1
            self.model.append(body)

        @rule(bodies=st.lists(BODIES, min_size=1, max_size=20))
        def append_many(self, bodies: list[bytes]) -> None:
            rs = client.append_many(bodies)
            assert [r.index for r in rs] == list(range(self.end + 1, self.end + 1 + len(bodies)))
            assert len({r.term for r in rs}) == 1
            self.model.extend(bodies)

        @rule(body=BODIES)
        def append_if_end_is_ours(self, body: bytes) -> None:
            r = client.append(body, expected_end=self.end)
            assert r.index == self.end + 1
            self.model.append(body)

        @rule(body=BODIES, off=st.integers(min_value=-3, max_value=3).filter(lambda d: d != 0))
        def append_if_end_is_not_ours(self, body: bytes, off: int) -> None:
            # Nothing is written either way: the next checks see it.
            if self.end + off < -1:  # not an index: refused by the client before it is sent
                with pytest.raises(InvalidArgumentError):
                    client.append(body, expected_end=self.end + off)
                return
            with pytest.raises(ExpectedEndMismatchError) as e:
                client.append(body, expected_end=self.end + off)
            assert e.value.actual_end == self.end

        @rule(body=BODIES)
        def append_with_an_end_that_is_no_index(self, body: bytes) -> None:
            with pytest.raises(InvalidArgumentError):  # -2 is "no condition" on the wire: never sent as one
                client.append(body, expected_end=-2)

        @precondition(lambda self: self.model)
        @rule(data=st.data())
        def get(self, data: st.DataObject) -> None:
            k = data.draw(st.integers(min_value=0, max_value=len(self.model) - 1))
            e = client.get(self.start + k)
            assert (e.index, e.body) == (self.start + k, self.model[k])

        @precondition(lambda self: self.model)
        @rule(data=st.data())
        def read(self, data: st.DataObject) -> None:
            k = data.draw(st.integers(min_value=0, max_value=len(self.model) - 1))
            n = data.draw(st.integers(min_value=1, max_value=len(self.model) - k + 3))
            got = [(e.index, e.body) for e in client.read(self.start + k, n)]
            want = [(self.start + i, b) for i, b in enumerate(self.model[k:k + n], start=k)]
            assert got == want

        @invariant()
        def nothing_past_the_end(self) -> None:
            if hasattr(self, "model"):
                assert list(client.read(self.end + 1, 5)) == []

    return ClientProtocol


def test_client_protocol_against_a_live_cluster(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=3)
    with Client(cluster.endpoints, group="g0", retry_timeout=30) as client:
        run_state_machine_as_test(_machine(client), settings=settings(
            max_examples=25, stateful_step_count=20, deadline=None,
            suppress_health_check=[HealthCheck.too_slow]))
