"""READ, GET and TAIL's trailing `min_index` (protocol version 3, issue 32): a body of version 2 ends before it and
decodes with -1; a client sends it only on a connection of version 3."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgpack
import pytest

from quorumlog.client.seen import SeenIndexes
from quorumlog.net.bodies import INT, Schema
from quorumlog.net.errors import FieldTypeError, FieldValueError, ProtocolError
from quorumlog.net.ops import Op
from quorumlog.net.schemas import GET_REQUEST, READ_REQUEST, REQUESTS, TAIL_REQUEST

# (schema, the fields of a version-2 body)
V2_BODIES: list[tuple[Schema, tuple[Any, ...]]] = [
    (READ_REQUEST, ("g0", 5, 100, 1 << 20, False)),
    (GET_REQUEST, ("g0", 7)),
    (TAIL_REQUEST, ("g0", 3, True)),
]


@pytest.mark.parametrize("schema,values", V2_BODIES, ids=lambda v: getattr(v, "name", ""))
def test_a_body_without_min_index_decodes_with_minus_one(schema: Schema, values: tuple[Any, ...]) -> None:
    assert schema.fields[-1][0] == "min_index" and schema.defaults == (-1,)
    old = schema.decode(msgpack.packb(values))  # what a client of version 2 sends
    assert old.min_index == -1 and tuple(old)[:-1] == values
    new = schema.decode(msgpack.packb((*values, 57)))
    assert new.min_index == 57 and tuple(new) == (*values, 57)
    # Encoding takes either layout: one value fewer is the version-2 body, byte for byte.
    assert schema.encode(*values) == msgpack.packb(values)
    assert schema.decode(schema.encode(*values, 0)).min_index == 0


@pytest.mark.parametrize("schema,values", V2_BODIES, ids=lambda v: getattr(v, "name", ""))
def test_bodies_of_other_lengths_or_a_bad_min_index_still_fail(schema: Schema, values: tuple[Any, ...]) -> None:
    n = len(values)
    with pytest.raises(ProtocolError, match=f"expected {n} to {n + 1} fields, got {n - 1}"):
        schema.decode(msgpack.packb(values[:-1]))
    with pytest.raises(ProtocolError, match=f"expected {n} to {n + 1} fields, got {n + 2}"):
        schema.decode(msgpack.packb((*values, 1, 2)))
    with pytest.raises(ProtocolError, match="expected 2 to 3|expected 5 to 6|expected 3 to 4"):
        schema.encode(*values[:-1])
    with pytest.raises(FieldValueError, match="min_index: -2 outside"):
        schema.decode(msgpack.packb((*values, -2)))
    with pytest.raises(FieldTypeError, match="min_index: expected index, got str"):
        schema.decode(msgpack.packb((*values, "57")))
    with pytest.raises(FieldTypeError, match="min_index: expected index, got bool"):
        schema.encode(*values, True)
    assert REQUESTS[Op.READ] is READ_REQUEST and REQUESTS[Op.GET] is GET_REQUEST and REQUESTS[Op.TAIL] is TAIL_REQUEST


def test_schema_defaults_complete_only_the_last_fields() -> None:
    s = Schema("S", [("a", INT), ("b", INT), ("c", INT)], defaults=(8, 9))
    assert tuple(s.decode(msgpack.packb((1,)))) == (1, 8, 9)
    assert tuple(s.decode(msgpack.packb((1, 2)))) == (1, 2, 9)
    assert tuple(s.decode(msgpack.packb((1, 2, 3)))) == (1, 2, 3)
    with pytest.raises(ProtocolError, match="expected 1 to 3 fields, got 0"):
        s.decode(msgpack.packb(()))
    with pytest.raises(ValueError, match="more defaults than fields"):
        Schema("T", [("a", INT)], defaults=(1, 2))


@pytest.mark.parametrize("version,min_index,sent", [(3, 57, 57), (3, 0, 0), (3, -1, None), (2, 57, None),
                                                    (None, 57, None)])
def test_the_client_sends_min_index_only_on_a_connection_of_version_3(version: int | None, min_index: int,
                                                                       sent: int | None) -> None:
    conn: Any = SimpleNamespace(version=version)
    body = SeenIndexes._with_min_index(conn, READ_REQUEST, ("g0", 5, 100, 1 << 20, False), min_index)
    values = msgpack.unpackb(body)
    if sent is None:  # the version-2 body: a node of version 2 would refuse a longer one
        assert len(values) == 5 and READ_REQUEST.decode(body).min_index == -1
    else:
        assert len(values) == 6 and values[-1] == sent
