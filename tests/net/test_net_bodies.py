"""Body schemas: strict types and arity; every malformed body is a ProtocolError."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorumlog.errors import ResponseCode
from quorumlog.net import schemas
from quorumlog.net.bodies import (
    ANY,
    BOOL,
    BYTES,
    INT,
    OPT_STR,
    STR,
    U16,
    Any_,
    Bool,
    Bytes,
    Float,
    Int,
    List,
    Map,
    Opt,
    Schema,
    Str,
    decode_response,
    decode_response_view,
    encode_error,
)
from quorumlog.net.errors import ProtocolError, ResponseError
from quorumlog.net.frames import GATHER_BYTES, Kind, body_bytes
from quorumlog.net.ops import DLEDGER_CODES, Op, from_dledger_code, op_name

S = Schema("Sample", [("group", STR), ("index", INT), ("body", BYTES), ("flag", BOOL), ("leader", OPT_STR),
                      ("items", List(BYTES)), ("peers", Map(STR))])


def test_round_trip_with_attribute_access():
    body = S.encode("g0", 42, memoryview(b"\x00\x01"), True, None, [b"a", bytearray(b"b")], {"n0": "h:1"})
    r = S.decode(body)
    assert (r.group, r.index, r.body, r.flag, r.leader, r.items, r.peers) == (
        "g0", 42, b"\x00\x01", True, None, (b"a", b"b"), {"n0": "h:1"})
    assert S.decode(memoryview(body)) == r


@pytest.mark.parametrize("values,match", [
    (["g0", 1, b"", True, None, []], "expected 7 fields"),
    (["g0", 1, b"", True, None, [], {}, 1], "expected 7 fields"),
    ([1, 1, b"", True, None, [], {}], "group: expected str"),
    (["g0", True, b"", True, None, [], {}], "index: expected int"),
    (["g0", 1.0, b"", True, None, [], {}], "index: expected int"),
    (["g0", 2**63, b"", True, None, [], {}], "outside"),
    (["g0", 1, "text", True, None, [], {}], "body: expected bytes"),
    (["g0", 1, b"", 1, None, [], {}], "flag: expected bool"),
    (["g0", 1, b"", True, 5, [], {}], "leader: expected str"),
    (["g0", 1, b"", True, None, [b"a", "b"], {}], r"items\[1\]"),
    (["g0", 1, b"", True, None, [], {"n0": 1}], "peers"),
])
def test_wrong_bodies_are_protocol_errors(values, match):
    with pytest.raises(ProtocolError, match=match):
        S.decode(msgpack.packb(values))
    with pytest.raises(ProtocolError):
        S.encode(*values)


@pytest.mark.parametrize("values,builtin", [
    ([1, 1, b"", True, None, [], {}], TypeError),
    (["g0", 1, "text", True, None, [], {}], TypeError),
    (["g0", 1, b"", True, None, [b"a", "b"], {}], TypeError),
    (["g0", 2**63, b"", True, None, [], {}], ValueError),
    (["g" * 70_000, 1, b"", True, None, [], {}], ValueError),
])
def test_a_field_of_the_wrong_type_or_range_is_also_a_type_or_value_error(values, builtin):
    """A caller that passes a str body, or an index out of range, can catch what Python code expects;
    from the network it is the same ProtocolError as before."""
    with pytest.raises(ProtocolError) as info:
        S.encode(*values)
    assert isinstance(info.value, builtin)
    with pytest.raises(builtin):
        S.decode(msgpack.packb(values))


def test_a_str_body_given_to_the_client_is_a_type_error_before_any_connection():
    from quorumlog.client import Client

    c = Client("127.0.0.1:1", retry_timeout=1)  # nothing listens there: the check comes first
    try:
        with pytest.raises(TypeError, match="AppendRequest.body: expected bytes, got str"):
            c.append("text")  # type: ignore[arg-type]
    finally:
        c.close()


@pytest.mark.parametrize("raw", [
    b"", b"\xc1", b"\x93\x01", msgpack.packb([1]) + b"\x00", msgpack.packb({"a": 1}), msgpack.packb(5),
    msgpack.packb([msgpack.ExtType(5, b"x")] * 7), b"\x91" * 2000 + b"\x90",
    msgpack.packb(["\udcff"], unicode_errors="surrogatepass"),
])
def test_malformed_msgpack_is_a_protocol_error(raw):
    with pytest.raises(ProtocolError):
        S.decode(raw)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_never_escape_as_other_exceptions(raw):
    for schema in (S, *schemas.REQUESTS.values(), *schemas.RESPONSES.values()):
        with contextlib.suppress(ProtocolError):
            schema.decode(raw)
        with contextlib.suppress(ProtocolError, ResponseError):
            decode_response(schema, raw)


def test_bytes_length_limit_and_any():
    short = Schema("Short", [("b", Bytes(4)), ("doc", ANY)])
    assert short.decode(short.encode(b"1234", {"a": [1, "x", None, {"b": 2.5}]})).doc["a"][1] == "x"
    with pytest.raises(ProtocolError, match="more than 4"):
        short.decode(msgpack.packb([b"12345", None]))
    with pytest.raises(ProtocolError):
        short.decode(msgpack.packb([b"1", msgpack.ExtType(1, b"")]))


def test_generic_error_response():
    body = encode_error(ResponseCode.NOT_LEADER, "ask n1", "n1")
    with pytest.raises(ResponseError) as ei:
        decode_response(schemas.APPEND_RESPONSE, body)
    assert ei.value.code == ResponseCode.NOT_LEADER and ei.value.leader == "n1" and ei.value.reason == "ask n1"
    ok = schemas.APPEND_RESPONSE.encode(int(ResponseCode.SUCCESS), 7, 2, 4096)
    assert decode_response(schemas.APPEND_RESPONSE, ok).index == 7
    with pytest.raises(ProtocolError):
        decode_response(schemas.APPEND_RESPONSE, msgpack.packb([404, 1, 2]))
    with pytest.raises(ResponseError) as ei:
        decode_response(schemas.APPEND_RESPONSE, encode_error(999, "?"))
    assert ei.value.code == ResponseCode.UNKNOWN


def test_non_generic_response_keeps_its_layout_on_failure():
    body = schemas.HELLO_RESPONSE.encode(int(ResponseCode.UNSUPPORTED), "old", 1, "n0", b"", False)
    assert decode_response(schemas.HELLO_RESPONSE, body).reason == "old"


def test_register_refuses_duplicates():
    with pytest.raises(ValueError):
        schemas.register(Op.APPEND, Kind.REQUEST, Schema("X", [("a", U16)]))
    assert Op.VOTE not in schemas.REQUESTS  # Raft bodies come with raft/messages.py


def test_ops_fit_a_byte_and_map_to_dledger_codes():
    assert all(0 < op <= 255 for op in Op)
    assert DLEDGER_CODES[Op.VOTE] == 51001 and from_dledger_code(51004) is Op.PUSH
    assert from_dledger_code(50001) is Op.APPEND
    assert op_name(Op.GET) == "GET" and op_name(250) == "op#250"
    with pytest.raises(KeyError):
        from_dledger_code(1)


def _outcome(fn, *args):  # type: ignore[no-untyped-def]
    try:
        return fn(*args)
    except (ProtocolError, ResponseError) as e:
        return type(e), str(e)


@settings(max_examples=300, deadline=None)
@given(entries=st.binary(max_size=70_000), nxt=st.integers(-3, 2**64 - 1), committed=st.integers(-3, 2**63),
       code=st.sampled_from([int(ResponseCode.SUCCESS), 404]), cut=st.integers(0, 12), extra=st.booleans())
def test_read_answers_decode_as_views_with_the_generic_outcome(entries, nxt, committed, code, cut, extra):
    """decode_response_view gives what decode_response gives (the same record, or the same error), the
    entries as a view of the body (no copy), whatever the answer: valid, an error, cut short, too long."""
    body = msgpack.packb([code, entries, nxt, committed] + ([1] if extra else []))
    body = memoryview(body[:len(body) - cut] if cut < len(body) else body)
    got, want = _outcome(decode_response_view, schemas.READ_RESPONSE, body), \
        _outcome(decode_response, schemas.READ_RESPONSE, body)
    if isinstance(want, tuple) and isinstance(want[0], type):
        assert isinstance(got, tuple) and got[0] is want[0]
    else:
        assert isinstance(got.entries, memoryview) and got.entries.obj is body.obj
        assert got._replace(entries=bytes(got.entries)) == want


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_never_escape_decode_response_view(raw):
    for schema in (schemas.READ_RESPONSE, schemas.GET_RESPONSE, schemas.APPEND_RESPONSE):
        with contextlib.suppress(ProtocolError, ResponseError):
            decode_response_view(schema, memoryview(raw))


def test_ok_packs_a_success_answer_its_schema_decodes():
    body = schemas.APPEND_BATCH_RESPONSE.ok(7, 2, [4096, 4200])
    r = decode_response(schemas.APPEND_BATCH_RESPONSE, body)
    assert (r.code, r.first_index, r.term, r.positions) == (ResponseCode.SUCCESS, 7, 2, (4096, 4200))
    assert body == schemas.APPEND_BATCH_RESPONSE.encode(int(ResponseCode.SUCCESS), 7, 2, [4096, 4200])
    assert decode_response(schemas.READ_RESPONSE, schemas.READ_RESPONSE.ok(b"xy", 3, 2)).entries == b"xy"
    assert decode_response(schemas.UNTAIL_RESPONSE, schemas.UNTAIL_RESPONSE.ok()).code == ResponseCode.SUCCESS
    with pytest.raises(ValueError, match="3 fields after the code, got 2"):
        schemas.APPEND_RESPONSE.ok(7, 2)


@settings(max_examples=50, deadline=None)
@given(size=st.sampled_from([0, 1, 255, 65535, 65536, 70_001, 1 << 20]), kind=st.sampled_from([bytes, bytearray,
                                                                                            memoryview]))
def test_ok_answers_pack_large_bytes_to_the_same_bytes(size, kind):
    """Schema.ok and encode_body leave a large bytes field as a part of its own, not copied, between the
    packed bytes around it: joined, the bytes are msgpack's."""
    data = kind(bytes(range(256)) * (size // 256) + bytes(size % 256))
    read = schemas.READ_RESPONSE.ok(data, 7, 2**40)
    assert body_bytes(read) == msgpack.packb((int(ResponseCode.SUCCESS), bytes(data), 7, 2**40))
    assert body_bytes(schemas.GET_RESPONSE.ok(data)) == msgpack.packb((int(ResponseCode.SUCCESS), bytes(data)))
    assert body_bytes(schemas.READ_RESPONSE.encode_body(0, data, 7, 2**40)) == msgpack.packb((0, bytes(data), 7, 2**40))
    if size >= GATHER_BYTES:
        assert isinstance(read, list) and any(part is data for part in read)
    else:
        assert isinstance(read, bytes)


# Values of every kind a field may meet: in and out of each type's range, wrong types, nested lists.
_ANY_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**64), max_value=2**64)
    | st.sampled_from([-1, 0, 1, 255, 256, 2**32 - 1, 2**32, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1])
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=4) | st.binary(max_size=4)
    | st.builds(bytearray, st.binary(max_size=4)) | st.builds(memoryview, st.binary(max_size=4)),
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.text(max_size=2) | st.integers(0, 3), inner, max_size=2),
    max_leaves=6)
_BOUNDS = Schema("Bounds", [("s", Str(3)), ("b", Bytes(3)), ("i", Int(-2, 5)), ("l", List(U16, 2)),
                             ("o", Opt(Bytes(2))), ("f", Float()), ("m", Map(Opt(Int(0, 1)))), ("t", Bool())])
_ALL_SCHEMAS = sorted({id(s): s for s in [S, _BOUNDS, *schemas.REQUESTS.values(), *schemas.RESPONSES.values(),
                                          *schemas.ONEWAYS.values(), *schemas.PEER_MESSAGES.values()]}.values(),
                      key=lambda s: s.name)


def _fields_fit(schema: Schema, values: tuple) -> bool:
    """The field-by-field checks alone (what the compiled test must agree with)."""
    try:
        for (_, t), v in zip(schema.fields, values, strict=True):
            t.check(v, "")
    except ProtocolError:
        return False
    return True


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=st.sampled_from(_ALL_SCHEMAS) | st.just(_BOUNDS), data=st.data())  # (half: small bounds)
def test_a_schemas_compiled_test_agrees_with_its_field_checks(schema, data):
    """Each schema tests a message's values in one generated function; it must accept exactly what the
    field-by-field checks accept, for valid values (drawn from a valid message, then some fields
    replaced by anything) and for anything at all."""
    n = len(schema.fields)
    valid = tuple(_valid_value(t, data) for _, t in schema.fields)
    assert _fields_fit(schema, valid)
    mutated = list(valid)
    for i in data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=n)) if n else []:
        mutated[i] = data.draw(_ANY_VALUE)
    for values in (valid, tuple(mutated)):
        fits = _fields_fit(schema, values)
        assert schema._passes(values) is fits, (schema, values)
        if fits:
            schema.check(values)
        else:
            with pytest.raises(ProtocolError):
                schema.check(values)
    assert schema._passes(list(valid)) is False  # a list goes the field-by-field way (and passes there)
    schema.check(list(valid))


def _valid_value(t, data):
    """A value `t` accepts, drawn by its kind (every field type the registered schemas use)."""
    if isinstance(t, Int):
        return data.draw(st.sampled_from([t.lo, t.hi]) | st.integers(t.lo, t.hi))
    if isinstance(t, Float):
        return data.draw(st.floats(allow_nan=False, allow_infinity=False))
    if isinstance(t, Str):
        return data.draw(st.text(min_size=min(t.max_len, 3), max_size=min(t.max_len, 3))
                         | st.text(max_size=min(t.max_len, 8)))
    if isinstance(t, Bytes):
        most = 8 if t.max_len is None else min(t.max_len, 8)
        return data.draw(st.binary(min_size=most, max_size=most) | st.binary(max_size=most))
    if isinstance(t, Bool):
        return data.draw(st.booleans())
    if isinstance(t, Opt):
        return None if data.draw(st.booleans()) else _valid_value(t.inner, data)
    if isinstance(t, List):
        return tuple(_valid_value(t.item, data) for _ in range(data.draw(st.integers(0, min(t.max_len, 2)))))
    if isinstance(t, Map):
        keys = data.draw(st.lists(st.text(max_size=3), max_size=2))
        return {k: _valid_value(t.value, data) for k in keys}
    if isinstance(t, Any_):
        return data.draw(st.integers(0, 9) | st.text(max_size=3))
    raise AssertionError(f"no valid values known for {t!r}")


@pytest.mark.parametrize("t,values", [
    (Int(-2, 5), [-3, -2, 5, 6, True, False, 1.0, None, "1"]),
    (U16, [0, 0xFFFF, 0x10000, -1]),
    (Float(), [0.5, 1, float("nan"), float("inf"), -float("inf"), True, None, "0.5"]),
    (Str(3), ["", "abc", "abcd", b"abc", None]),
    (Bytes(3), [b"", b"abc", b"abcd", bytearray(b"ab"), memoryview(b"abcd"), memoryview(b"a"), "ab", None]),
    (BYTES, [b"x" * 100, bytearray(), "x", 1]),
    (Bool(), [True, False, 1, 0, None, 1.0]),
    (Opt(Int(0, 1)), [None, 0, 1, 2, True]),
    (Opt(Bytes(2)), [None, b"ab", b"abc", "ab"]),
    (List(U16, 2), [(), (1,), [1, 2], (1, 2, 3), (1, -1), (1, True), (1, None), "12", b"12", None]),
    (List(List(Bool(), 1)), [((True,),), ((True, False),), ((1,),), ([],), (None,)]),
    (Map(Opt(Int(0, 1))), [{}, {"a": None}, {"a": 2}, {1: 1}, [], None]),
    (ANY, [1, "x", (1, [2]), {"a": msgpack.ExtType(1, b"")}, msgpack.ExtType(1, b"")]),
])
def test_a_fields_compiled_test_agrees_with_its_check_at_the_edges(t, values):
    one = Schema("One", [("x", t)])
    for v in values:
        assert one._passes((v,)) is _fields_fit(one, (v,)), (t, v)
