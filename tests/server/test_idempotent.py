"""Idempotent producers: a retried (producer id, sequence) is answered DUPLICATE_SEQUENCE."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from jetserver.replication.producers import MAX_RUNS_PER_PRODUCER, ProducerTable
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient


def test_producer_table_runs() -> None:
    table = ProducerTable()
    for seq in range(10):
        table.record(1, seq, 100 + seq, 5)
    table.record(1, 10, 200, 6)  # a new run: offset jumped
    assert table.lookup(1, 0) == (100, 5)
    assert table.lookup(1, 9) == (109, 5)
    assert table.lookup(1, 10) == (200, 6)
    assert table.lookup(1, 11) is None
    assert table.lookup(2, 0) is None
    for i in range(MAX_RUNS_PER_PRODUCER):
        table.record(1, 1000 + 2 * i, 1000 + 3 * i, 7)  # each its own run
    assert table.lookup(1, 0) is None  # oldest runs forgotten


def test_a_recorded_run_is_the_same_table_as_its_records_one_by_one() -> None:
    """``record_run`` (a ProduceMany section's messages, broker/append_many.py) leaves
    the table as ``record`` of each message would: lookups, the next sequence expected
    and the runs kept (joined to the producer's last run where they continue it)."""
    writes = [
        (1, 0, 0, 3, 10),
        (1, 3, 3, 2, 10),
        (2, 5, 5, 4, 11),
        (1, 9, 9, 1, 12),
        (1, 20, 30, 3, 13),
    ]
    by_run, by_record = ProducerTable(), ProducerTable()
    for producer, seq, offset, count, ts in writes:
        by_run.record_run(producer, seq, offset, count, ts)
        for i in range(count):
            by_record.record(producer, seq + i, offset + i, ts)
    by_run.record_run(3, 0, 40, 0, 14)  # nothing
    for producer in (1, 2, 3):
        assert by_run.expected(producer) == by_record.expected(producer)
        for seq in range(-1, 25):
            assert by_run.lookup(producer, seq) == by_record.lookup(producer, seq), (producer, seq)
    assert by_run._producers == by_record._producers


@pytest.mark.anyio
async def test_retries_are_not_stored_twice(nats_server: NatsServer, tmp_path: Path) -> None:
    msgs = [ProduceMessage(f"m{i}".encode()) for i in range(5)]
    async with (
        running_server(nats_server.url, tmp_path / "data") as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="idem", subject="idem")
        first = await c.produce("idem", 0, msgs[:3], producer_id=7, base_seq=0)
        assert [(r.error_code, r.offset) for r in first] == [(0, 0), (0, 1), (0, 2)]
        retry = await c.produce("idem", 0, msgs[:3], producer_id=7, base_seq=0)
        assert [r.error_code for r in retry] == [ErrorCode.DUPLICATE_SEQUENCE] * 3
        assert [(r.offset, r.timestamp) for r in retry] == [(r.offset, r.timestamp) for r in first]
        # Overlapping retry: 1..4, of which 3 and 4 are new.
        mixed = await c.produce(
            "idem", 0, msgs[1:5], producer_id=7, base_seq=1, ack_policy=AckPolicy.ALL
        )
        assert [(r.error_code, r.offset) for r in mixed] == [
            (ErrorCode.DUPLICATE_SEQUENCE, 1),
            (ErrorCode.DUPLICATE_SEQUENCE, 2),
            (0, 3),
            (0, 4),
        ]
        # Same sequences from another producer id are new messages.
        other = await c.produce("idem", 0, msgs[:1], producer_id=8, base_seq=0)
        assert (other[0].error_code, other[0].offset) == (0, 5)
        # A producer not remembered starts at 0 or with the sequence-start flag; then a
        # lower sequence never seen is stored (a late retry whose run was forgotten).
        late = await c.produce("idem", 0, msgs[:1], producer_id=9, base_seq=5, sequence_start=True)
        late2 = await c.produce("idem", 0, msgs[:1], producer_id=9, base_seq=2)
        assert [late[0].offset, late2[0].offset] == [6, 7]
    # After a restart the producer state is rebuilt from the log.
    async with (
        running_server(nats_server.url, tmp_path / "data") as server,
        await RawClient.connect(server.address) as c,
    ):
        again = await c.produce("idem", 0, msgs[:3], producer_id=7, base_seq=0)
        assert [(r.error_code, r.offset) for r in again] == [
            (ErrorCode.DUPLICATE_SEQUENCE, 0),
            (ErrorCode.DUPLICATE_SEQUENCE, 1),
            (ErrorCode.DUPLICATE_SEQUENCE, 2),
        ]
        records = await c.fetch_all("idem", 0)
        assert len(records) == 8
        assert [r.producer_seq for r in records[:5]] == [0, 1, 2, 3, 4]
        assert records[0].producer_id == 7


def test_msg_ids_expire_after_the_window_and_are_forgotten_above_a_cut() -> None:
    table = ProducerTable()
    s = 10**9
    table.record_msg_id(b"a", 0, 100 * s)
    table.record_msg_id(b"b", 1, 150 * s)
    table.record_msg_id(b"c", 2, 160 * s)
    window = 120 * s
    assert table.lookup_msg_id(b"a", 200 * s, window) == (0, 100 * s)
    assert table.lookup_msg_id(b"a", 221 * s, window) is None  # older than the window
    assert table.lookup_msg_id(b"b", 221 * s, window) == (1, 150 * s)
    table.forget_from(2)  # a failed fsync cut the log back to offset 2
    assert table.lookup_msg_id(b"c", 221 * s, window) is None
    assert table.lookup_msg_id(b"b", 221 * s, window) == (1, 150 * s)


def test_producer_table_top_never_hides_a_remembered_sequence() -> None:
    """The shortcut for a sequence above all remembered ones must not hide a lower one:
    sequences out of order, another producer evicted, a cut that forgets the top."""
    table = ProducerTable()
    table.record(7, 50, 10, 1)
    table.record(7, 20, 11, 1)  # a retry of an older batch, stored after a newer one
    assert table.lookup(7, 50) == (10, 1)
    assert table.lookup(7, 20) == (11, 1)
    assert table.lookup(7, 51) is None
    table.forget_from(11)  # the cut forgets seq 20 only
    assert table.lookup(7, 20) is None
    assert table.lookup(7, 50) == (10, 1)
    table.forget_from(0)
    assert len(table) == 0
    table.record(7, 3, 0, 2)  # the producer is remembered again from scratch
    assert table.lookup(7, 3) == (0, 2)
    assert table.lookup(7, 50) is None


@pytest.mark.anyio
async def test_a_sequence_after_a_hole_waits_for_the_hole_or_the_start_flag(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Several requests in flight keep their order: a sequence above the next one expected
    is refused OUT_OF_ORDER_SEQUENCE (not stored, the expected one in the offset) until the
    hole is filled or the producer says every earlier sequence is settled (flags bit 1)."""
    msgs = [ProduceMessage(f"m{i}".encode()) for i in range(4)]
    ooo = ErrorCode.OUT_OF_ORDER_SEQUENCE
    async with (
        running_server(nats_server.url, tmp_path / "data") as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="seq", subject="seq")
        # Not remembered and not starting at 0: refused (its first request may be lost).
        ahead = await c.produce("seq", 0, msgs[:2], producer_id=3, base_seq=2)
        assert [(r.error_code, r.offset) for r in ahead] == [(ooo, -1), (ooo, -1)]
        first = await c.produce("seq", 0, msgs[:2], producer_id=3, base_seq=0)
        assert [(r.error_code, r.offset) for r in first] == [(0, 0), (0, 1)]
        # Sequences 2-3 "lost"; 4-5 arrive: refused, sequence 2 expected.
        for policy in (AckPolicy.LEADER, AckPolicy.ALL):
            skip = await c.produce("seq", 0, msgs[:2], producer_id=3, base_seq=4, ack_policy=policy)
            assert [(r.error_code, r.offset) for r in skip] == [(ooo, 2), (ooo, 2)]
        fill = await c.produce("seq", 0, msgs[:2], producer_id=3, base_seq=2)
        then = await c.produce("seq", 0, msgs[:2], producer_id=3, base_seq=4)
        assert [(r.error_code, r.offset) for r in fill + then] == [(0, 2), (0, 3), (0, 4), (0, 5)]
        # A hole the producer knows is settled (a message refused for good): the flag.
        flagged = await c.produce(
            "seq",
            0,
            msgs[:1],
            producer_id=3,
            base_seq=9,
            sequence_start=True,
            ack_policy=AckPolicy.ALL,  # (then the HW covers every record)
        )
        assert (flagged[0].error_code, flagged[0].offset) == (0, 6)
        records = await c.fetch_all("seq", 0)
        assert [r.producer_seq for r in records] == [0, 1, 2, 3, 4, 5, 9]


def test_a_cut_of_the_log_moves_the_expected_sequence_back() -> None:
    """After a truncation the producer's next sequence expected is the one after the
    highest it still has (else a request after a cut-off one would be taken out of order)."""
    table = ProducerTable()
    for seq in range(10):
        table.record(1, seq, 100 + seq, 5)
    assert table.expected(1) == 10
    table.forget_from(105)
    assert table.expected(1) == 5
    assert table.lookup(1, 4) == (104, 5)
    assert table.lookup(1, 5) is None
    table.forget_from(100)
    assert table.expected(1) is None
