"""The sinks' bulk path (jetspark._bulk, jetspark._write) against the SDK's per-message
code: wire bytes, Kafka's murmur2, partition choice, sequence numbers and request cuts
across Arrow batch boundaries, and that numbering does not depend on the order rows arrive
in. No server, no JVM."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, encode_produce_request
from jetsdk.partitioner import murmur2 as sdk_murmur2
from jetsdk.partitioner import partition_for_key
from jetspark import _write
from jetspark._bulk import encode_messages, murmur2, request_body
from jetspark.errors import ColumnError
from jetspark.options import sink_options

from .arrow_rows import arrow_batches

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30))
def test_murmur2_matches_the_sdk(keys: list[bytes]) -> None:
    array = pa.array(keys, pa.binary())
    data = np.frombuffer(array.buffers()[2] or b"", dtype=np.uint8)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[: len(keys) + 1].astype(np.int64)
    got = murmur2(data, offsets[:-1], np.diff(offsets))
    assert got.tolist() == [sdk_murmur2(k) & 0xFFFFFFFF for k in keys]


def _row(rng: random.Random) -> dict[str, Any]:
    return {
        "value": rng.choice([None, b"", b"v" * rng.randrange(300), "välue"]),
        "key": rng.choice([None, b"", b"k%d" % rng.randrange(50), "ключ"]),
        "headers": rng.choice(
            [None, [], [{"key": "a", "value": b"1"}], [{"key": "ü", "value": None}] * 2]
        ),
    }


def _as_bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), count=st.integers(0, 30), string_keys=st.booleans())
def test_request_bytes_equal_the_sdk_encoding(seed: int, count: int, string_keys: bool) -> None:
    rng = random.Random(seed)
    rows = [_row(rng) for _ in range(count)]
    kind = pa.string() if string_keys else pa.binary()
    cast = (lambda v: v.decode() if isinstance(v, bytes) else v) if string_keys else _as_bytes
    value = pa.array([cast(r["value"]) for r in rows], kind)
    key = pa.array([cast(r["key"]) for r in rows], kind)
    headers = pa.array([r["headers"] for r in rows], _HEADERS)
    msgs = encode_messages(value, key, headers)
    body = b"".join(request_body("s", 3, AckPolicy.ALL, 5000, 77, 10, count, msgs.data.to_pylist()))
    expected = [
        ProduceMessage(
            _as_bytes(r["value"]) or b"",
            _as_bytes(r["key"]),
            tuple((h["key"], h["value"] or b"") for h in r["headers"] or ()),
        )
        for r in rows
    ]
    request = ProduceRequest("s", 3, AckPolicy.ALL, 5000, tuple(expected), 77, 10)
    assert body == encode_produce_request(request)
    sizes = [
        len(m.value) + len(m.key or b"") + sum(len(n) + len(v) for n, v in m.headers)
        for m in expected
    ]
    assert msgs.sizes.tolist() == sizes
    assert msgs.has_key.tolist() == [r["key"] is not None for r in rows]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), count=st.integers(1, 20))
def test_subject_column_bytes_equal_the_sdk_encoding(seed: int, count: int) -> None:
    rng = random.Random(seed)
    rows = [_row(rng) for _ in range(count)]
    subjects = [rng.choice([None, "", "orders.eu", "ö.x" * rng.randrange(1, 5)]) for _ in rows]
    value = pa.array([_as_bytes(r["value"]) for r in rows], pa.binary())
    key = pa.array([_as_bytes(r["key"]) for r in rows], pa.binary())
    headers = pa.array([r["headers"] for r in rows], _HEADERS)
    msgs = encode_messages(value, key, headers, pa.array(subjects, pa.string()))
    body = b"".join(request_body("s", 0, AckPolicy.ALL, 5000, 77, 0, count, msgs.data.to_pylist()))
    expected = tuple(
        ProduceMessage(
            _as_bytes(r["value"]) or b"",
            _as_bytes(r["key"]),
            tuple((h["key"], h["value"] or b"") for h in r["headers"] or ()),
            subject or "",
        )
        for r, subject in zip(rows, subjects, strict=True)
    )
    assert body == encode_produce_request(
        ProduceRequest("s", 0, AckPolicy.ALL, 5000, expected, 77, 0)
    )


def test_a_header_without_key_is_a_column_error() -> None:
    headers = pa.array([[{"key": None, "value": b"x"}]], _HEADERS)
    with pytest.raises(ColumnError, match="null key"):
        encode_messages(pa.array([b"v"]), None, headers)


class _FakeWriter(_write._TaskWriter):
    """The task writer with a fixed partition count and requests recorded, not sent."""

    def __init__(
        self,
        task: int,
        partitions: int,
        stream: str | None = "s",
        request_bytes: int = _write.MAX_CHUNK_BYTES,
    ) -> None:
        raw = {"servers": "127.0.0.1:1"} | ({"stream": stream} if stream else {})
        self.opts = sink_options(raw)
        self.producer_id = 1
        self.task = task
        self.request_bytes = request_bytes
        self.partition_counts = {"s": partitions, "t": 2}
        self.targets = {}
        self.init_rows()
        self.written = 0
        self.duplicates = 0
        self.sent: list[tuple[str, int, int, int]] = []  # stream, partition, base seq, count
        self.messages: dict[tuple[str, int, int], bytes] = {}  # (stream, partition, seq)

    def ship(self, stream: str, partition: int, target: Any) -> None:
        self.sent.append((stream, partition, target.next_seq, target.chunk_count))
        raw = b"".join(target.chunk)
        seq = target.next_seq
        for message in _split_messages(raw):
            self.messages[(stream, partition, seq)] = message
            seq += 1
        target.next_seq += target.chunk_count
        target.chunk, target.chunk_count, target.chunk_bytes = [], 0, 0

    def settle(self, stream: str, partition: int, target: Any) -> None:
        pass


def _split_messages(raw: bytes) -> list[bytes]:
    """Cut encoded Produce messages (subject str16, key nbytes32, headers, value bytes32)."""
    out, i = [], 0
    while i < len(raw):
        start = i
        i += 2 + int.from_bytes(raw[i : i + 2], "big")
        klen = int.from_bytes(raw[i : i + 4], "big", signed=True)
        i += 4 + max(klen, 0)
        count = int.from_bytes(raw[i : i + 2], "big")
        i += 2
        for _ in range(count):
            i += 2 + int.from_bytes(raw[i : i + 2], "big")
            i += 4 + int.from_bytes(raw[i : i + 4], "big")
        i += 4 + int.from_bytes(raw[i : i + 4], "big")
        out.append(raw[start:i])
    return out


def _sort_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """spec/spark.md "Row order": offset column (null first), partition column (null
    first), then the message's wire bytes (the SDK's encoding)."""
    request = ProduceRequest(
        "s", 0, AckPolicy.ALL, 0, (ProduceMessage(row["value"], row["key"], ()),), 1, 0
    )
    head = ProduceRequest("s", 0, AckPolicy.ALL, 0, (), 1, 0)
    message = encode_produce_request(request)[len(encode_produce_request(head)) :]
    part, offset = row.get("partition"), row.get("offset")
    return (offset is not None, offset or 0, part is not None, part or 0, message)


def _reference(
    rows: list[dict[str, Any]], task: int, partitions: int, limit: int = _write.MAX_CHUNK_BYTES
) -> list[Any]:
    """The row-at-a-time rules of the sinks: rows sorted by content, partition choice,
    then a request closes before a row when it holds MAX_CHUNK_MESSAGES or the row would
    take its estimate over ``limit`` (the writer's request_bytes)."""
    chunks: dict[int, list[int]] = {}  # partition -> [count, bytes]
    seqs: dict[int, int] = {}
    sent = []
    keyless = 0
    for row in sorted(rows, key=_sort_key):
        key, value = row["key"], row["value"]
        if row.get("partition") is not None:
            part = row["partition"]
        elif key is None:
            part = (task + keyless) % partitions
            keyless += 1
        else:
            part = partition_for_key(key, partitions)
        size = len(value) + len(key or b"")
        count, nbytes = chunks.setdefault(part, [0, 0])
        if count and (count >= _write.MAX_CHUNK_MESSAGES or nbytes + size > limit):
            sent.append(("s", part, seqs.get(part, 0), count))
            seqs[part] = seqs.get(part, 0) + count
            count, nbytes = 0, 0
        chunks[part] = [count + 1, nbytes + size + 16]
    for part, (count, _) in chunks.items():
        if count:
            sent.append(("s", part, seqs.get(part, 0), count))
    return sent


@pytest.mark.parametrize(
    ("seed", "limit"), [(1, _write.MAX_CHUNK_BYTES), (2, 1 << 20), (3, 1 << 20)]
)
def test_partitions_sequences_and_cuts_match_the_row_at_a_time_rules(seed: int, limit: int) -> None:
    rng = random.Random(seed)
    sizes = [0, 10, 100, 3000, 40_000]
    rows = [
        {
            "value": b"x" * rng.choice(sizes),
            "key": rng.choice([None, b"k%d" % rng.randrange(1000)]),
            "partition": rng.choice([None, None, None, rng.randrange(3)]),
        }
        for _ in range(9000)
    ]
    writer = _write_in_batches(rows, rng, task=5, partitions=3, request_bytes=limit)
    expected = _reference(rows, task=5, partitions=3, limit=limit)
    assert sorted(writer.sent) == sorted(expected)
    assert writer.keyless == sum(1 for r in rows if r["key"] is None and r["partition"] is None)


def _write_in_batches(
    rows: list[dict[str, Any]],
    rng: random.Random,
    task: int,
    partitions: int,
    request_bytes: int = _write.MAX_CHUNK_BYTES,
) -> _FakeWriter:
    writer = _FakeWriter(task=task, partitions=partitions, request_bytes=request_bytes)
    for batch in arrow_batches(rows, rng, [1, 7, 500, 2500]):
        writer.add_batch(batch)
    writer.finish()
    return writer


@pytest.mark.parametrize("seed", [4, 5])
@pytest.mark.parametrize("with_offsets", [False, True])
def test_numbering_does_not_depend_on_arrival_order(seed: int, with_offsets: bool) -> None:
    """The same rows (with repeated identical rows) in two orders and other batch cuts:
    every (partition, sequence) holds the same message, each copy of a repeated row has
    its own sequence, and with an ``offset`` column each partition is in offset order."""
    rng = random.Random(seed)
    rows = [
        {
            "value": b"v%d" % rng.randrange(40) * rng.choice([1, 300]),
            "key": rng.choice([None, None, b"k%d" % rng.randrange(20)]),
            "partition": rng.choice([None, None, None, rng.randrange(3)]),
        }
        for _ in range(3000)
    ]
    if with_offsets:  # distinct values: each message tells its row
        for i, row in enumerate(rows):
            row["offset"], row["value"] = 10 * i, b"%d" % i + row["value"]
    else:
        rows += [dict(r) for r in rows[:200]]  # identical copies
    first = _write_in_batches(rows, rng, task=2, partitions=3)
    shuffled = list(rows)
    rng.shuffle(shuffled)
    second = _write_in_batches(shuffled, rng, task=2, partitions=3)
    assert first.messages == second.messages
    assert len(first.messages) == len(rows)
    assert sorted(first.sent) == sorted(second.sent)
    if with_offsets:  # each partition holds its rows in offset order
        offset_of = {_sort_key(r)[-1]: r["offset"] for r in rows}
        for part in range(3):
            seqs = sorted(seq for (_, p, seq) in first.messages if p == part)
            offsets = [offset_of[first.messages[("s", part, seq)]] for seq in seqs]
            assert offsets == sorted(offsets)
            assert len(offsets) > 100


def test_stream_column_routes_rows_and_bad_partitions_are_refused() -> None:
    writer = _FakeWriter(task=0, partitions=4, stream=None)
    batch = pa.RecordBatch.from_pydict(
        {"value": [b"a", b"b", b"c"], "stream": ["s", "t", "s"], "partition": [3, 1, 0]}
    )
    writer.add_batch(batch)
    writer.finish()
    assert sorted(writer.sent) == [("s", 0, 0, 1), ("s", 3, 0, 1), ("t", 1, 0, 1)]
    assert writer.messages[("t", 1, 0)].endswith(b"b")
    with pytest.raises(ColumnError, match="has no partition 2"):
        writer.add_batch(
            pa.RecordBatch.from_pydict({"value": [b"a"], "stream": ["t"], "partition": [2]})
        )
    with pytest.raises(ColumnError, match="null stream"):
        writer.add_batch(
            pa.RecordBatch.from_pydict({"value": [b"a"], "stream": pa.array([None], pa.string())})
        )


@pytest.mark.parametrize("size", [603, 724, 1074])
def test_a_request_is_cut_exactly_at_the_byte_limit(size: int) -> None:
    """Rows big enough that the byte estimate (value + 16 each), not the message count,
    cuts the requests."""
    rows = [{"value": b"x" * size, "key": None, "partition": 0} for _ in range(5000)]
    writer = _FakeWriter(task=0, partitions=1)
    values = pa.array([r["value"] for r in rows], pa.binary())
    writer.add_batch(pa.RecordBatch.from_pydict({"value": values}))
    writer.finish()
    assert writer.sent == _reference(rows, task=0, partitions=1)
    assert len(writer.sent) > 2


class _InFlightWriter(_FakeWriter):
    """Records which partitions have a request awaiting its answer, as the real writer's
    ship (which first waits for the target's previous request) and settle leave them."""

    def __init__(self, partitions: int) -> None:
        super().__init__(task=0, partitions=partitions)
        self.flying: set[int] = set()
        self.most = 0

    def ship(self, stream: str, partition: int, target: Any) -> None:
        self.settle(stream, partition, target)
        assert partition not in self.flying  # one request in flight per partition
        super().ship(stream, partition, target)
        self.flying.add(partition)
        self.most = max(self.most, len(self.flying))

    def settle(self, stream: str, partition: int, target: Any) -> None:
        self.flying.discard(partition)


@pytest.mark.parametrize("cap", [2, 64])
def test_requests_go_round_robin_over_the_partitions(
    monkeypatch: pytest.MonkeyPatch, cap: int
) -> None:
    """Issue 39: every target partition has a request in flight at once (at most
    MAX_REQUESTS_IN_FLIGHT), not one partition's requests after another's; the requests
    and their sequences are the same."""
    monkeypatch.setattr(_write, "MAX_REQUESTS_IN_FLIGHT", cap)
    monkeypatch.setattr(_write, "MAX_CHUNK_MESSAGES", 100)  # 10 requests per partition
    rows = [{"value": b"x%d" % i, "key": None, "partition": i % 4} for i in range(4000)]
    writer = _InFlightWriter(partitions=4)
    columns = {
        "value": pa.array([r["value"] for r in rows], pa.binary()),
        "partition": pa.array([r["partition"] for r in rows], pa.int32()),
    }
    writer.add_batch(pa.RecordBatch.from_pydict(columns))
    writer.finish()
    assert sorted(writer.sent) == sorted(_reference(rows, task=0, partitions=4))
    assert [p for _, p, _, _ in writer.sent[:4]] == [0, 1, 2, 3]
    assert writer.most == min(cap, 4)


def test_sliced_and_large_arrays_encode_like_plain_ones() -> None:
    values = pa.array([b"a", None, b"ccc", b"", b"eeeee"], pa.binary())
    keys = pa.array(["k1", "k2", None, "", "ключ"], pa.string())
    plain = encode_messages(values.slice(1, 3), keys.slice(1, 3), None)
    sliced = encode_messages(
        pa.array([None, b"ccc", b""], pa.binary()), pa.array(["k2", None, ""], pa.string()), None
    )
    assert plain.data.to_pylist() == sliced.data.to_pylist()
    large = encode_messages(values.cast(pa.large_binary()), keys.cast(pa.large_string()), None)
    assert large.data.to_pylist() == encode_messages(values, keys, None).data.to_pylist()
    assert large.sizes.tolist() == [3, 2, 3, 0, 13]


def _large_rows(rng: random.Random, count: int) -> list[dict[str, Any]]:
    return [
        {
            "value": b"%d" % rng.randrange(50) * rng.choice([1, 3000, 9000]),
            "key": rng.choice([None, b"k%d" % rng.randrange(30)]),
            "partition": rng.choice([None, None, rng.randrange(3)]),
        }
        for _ in range(count)
    ]


def _count_takes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The row count of every take the writer makes from now on."""
    taken: list[int] = []
    real_take = _write.take

    def counting_take(data: pa.ChunkedArray, picks: Any) -> pa.ChunkedArray:
        taken.append(len(picks))
        return real_take(data, picks)

    monkeypatch.setattr(_write, "take", counting_take)
    return taken


@pytest.mark.parametrize("seed", [6, 7])
def test_large_messages_are_sent_as_views_not_taken(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Issue 39: messages of VIEW_MIN_MESSAGE_BYTES and more on average are not copied out
    by an Arrow take; their requests are views of the encoded messages, with the same
    requests, sequences and messages as through the take (failed before: no ``take`` to
    stand in for, every target's messages were taken)."""
    rows = _large_rows(random.Random(seed), 2000)
    taken = _count_takes(monkeypatch)
    viewed = _write_in_batches(rows, random.Random(seed), task=1, partitions=3)
    assert taken == []
    monkeypatch.setattr(_write, "VIEW_MIN_MESSAGE_BYTES", 1 << 40)  # every target taken
    copied = _write_in_batches(rows, random.Random(seed), task=1, partitions=3)
    assert sum(taken) == len(rows)
    assert viewed.messages == copied.messages
    assert viewed.sent == copied.sent
    assert sorted(viewed.sent) == sorted(_reference(rows, task=1, partitions=3))


def test_small_messages_are_still_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below VIEW_MIN_MESSAGE_BYTES on average one take per target copies the messages
    (a view per message would cost more)."""
    rows = [{"value": b"x" * 100, "key": b"k%d" % i, "partition": None} for i in range(500)]
    taken = _count_takes(monkeypatch)
    writer = _write_in_batches(rows, random.Random(8), task=0, partitions=3)
    assert len(taken) == 3
    assert sum(taken) == len(rows)
    assert sorted(writer.sent) == sorted(_reference(rows, task=0, partitions=3))


class _ChunkKeeper(_FakeWriter):
    """Keeps each request's parts as given (views), not only their joined bytes."""

    def __init__(self, task: int, partitions: int) -> None:
        super().__init__(task=task, partitions=partitions)
        self.parts: list[Any] = []

    def ship(self, stream: str, partition: int, target: Any) -> None:
        self.parts += target.chunk
        super().ship(stream, partition, target)


def test_large_values_are_sent_from_the_batches_own_buffers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39: at VIEW_MIN_MESSAGE_BYTES and more a message is sent as a view of its
    head and a view of the value in the batch's own buffer, so no value is copied (on the
    old code every part was a view of an encoded copy of the values). Null values (sent
    empty), string values and rows whose heads tie (same key and value length, other
    bytes) give the same messages and sequences as the joined path."""
    rng = random.Random(11)
    values = [b"%d" % rng.randrange(10, 40) * 3000 for _ in range(300)] + [None] * 5
    keys = [rng.choice([None, b"k1", b"k2"]) for _ in values]
    value_col = pa.array([None if v is None else v.decode() for v in values], pa.string())
    batch = pa.RecordBatch.from_pydict({"value": value_col, "key": pa.array(keys, pa.binary())})
    viewed = _ChunkKeeper(task=0, partitions=3)
    viewed.add_batch(batch)
    viewed.finish()
    buffer = value_col.buffers()[2]
    inside = [
        buffer.address <= np.frombuffer(p, np.uint8).ctypes.data < buffer.address + buffer.size
        for p in viewed.parts
        if len(p) >= 3000
    ]
    assert len(inside) == 300
    assert all(inside)
    monkeypatch.setattr(_write, "VIEW_MIN_MESSAGE_BYTES", 1 << 40)  # joined and taken
    joined = _FakeWriter(task=0, partitions=3)
    joined.add_batch(batch)
    joined.finish()
    assert viewed.messages == joined.messages
    assert viewed.sent == joined.sent
    rows = [{"value": v or b"", "key": k, "partition": None} for v, k in zip(values, keys)]
    assert sorted(viewed.sent) == sorted(_reference(rows, task=0, partitions=3))
