"""An idempotent producer's requests that reach the leader through NATS keep their order
(issue 32): the server that publishes them marks each message (``Jet-Seq``,
broker/seq_marks.py) and the leader refuses a marked sequence that skips one it has not
stored, OUT_OF_ORDER_SEQUENCE, as on the direct path (spec/protocol.md "Sequences").

Before, a replicated partition's failover stored a later request's messages before an
earlier one's retry when several were in flight: the new leader stored the old one's NATS
copies (and requests forwarded through NATS) without the check
(tests/cluster/test_faults_partition.py, ``m-00000381 at 383 after counter 387 at 382``).
Here a real server with ``produce_direct`` off sends every Produce request through NATS,
the path a forwarded request and a cut-off leader's copies take.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import nats
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from jetsdk.codec.transcode import EnvelopeBytes
from jetsdk.envelope import build_message
from jetserver.broker.seq_marks import SEQ_NEXT_BLOCK, SEQ_START_BLOCK, publish_marked, seq_mark
from jetserver.testing import nats_flushed
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

OOO = ErrorCode.OUT_OF_ORDER_SEQUENCE


def _msgs(*seqs: int) -> list[ProduceMessage]:
    return [ProduceMessage(b"s%d" % s) for s in seqs]


async def test_publish_marked_marks_each_message_and_the_first_of_a_start() -> None:
    sent: list[tuple[list[str], bytes]] = []

    async def publish(messages: Sequence[tuple[str, EnvelopeBytes]], block: bytes) -> int:
        sent.append(([bytes(p).decode() for _s, p in messages], block))
        return len(messages)

    msgs: list[tuple[str, EnvelopeBytes]] = [("s", b"a"), ("s", b"b"), ("s", b"c")]
    assert await publish_marked(publish, msgs, False, True) == 3
    assert await publish_marked(publish, msgs, True, False) == 3
    assert await publish_marked(publish, msgs, True, True) == 3
    assert await publish_marked(publish, msgs[:1], True, True) == 1
    assert sent == [
        (["a", "b", "c"], b""),
        (["a", "b", "c"], SEQ_NEXT_BLOCK),
        (["a"], SEQ_START_BLOCK),
        (["b", "c"], SEQ_NEXT_BLOCK),
        (["a"], SEQ_START_BLOCK),
    ]
    assert seq_mark([("Jet-Seq", b"start")]) is True
    assert seq_mark([("x", b"1"), ("jet-seq", b"next")]) is False
    assert seq_mark([("Jet-Stored", b"d 0")]) is None


async def test_a_request_through_nats_that_skips_a_sequence_waits_for_the_gap(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async with (
        running_server(nats_server.url, tmp_path / "data", ingest__produce_direct=False) as jet,
        await RawClient.connect(jet.address) as c,
    ):
        await c.create_stream(name="q", subject="q")
        nc = await nats.connect(nats_server.url)
        seen = await nc.subscribe("q")

        async def produce(*seqs: int, start: bool = False) -> list[tuple[int, int]]:
            results = await c.produce(
                "q",
                0,
                _msgs(*seqs),
                ack_policy=AckPolicy.ALL,
                producer_id=7,
                base_seq=seqs[0],
                sequence_start=start,
            )
            return [(r.error_code, r.offset) for r in results]

        assert await produce(0, 1) == [(0, 0), (0, 1)]
        # 4, 5 sent before 2, 3 is stored (a later request in flight, the earlier one lost
        # or on its way to a new leader): refused, not stored, the sequence expected said.
        assert await produce(4, 5) == [(OOO, 2), (OOO, 2)]
        assert await produce(2, 3) == [(0, 2), (0, 3)]
        assert await produce(4, 5) == [(0, 4), (0, 5)]
        # The sequence-start flag passes a hole (the client's word that 6..9 are settled).
        assert await produce(10, start=True) == [(0, 6)]
        # A request whose first message is refused: the rest of it is refused too.
        assert await produce(12, 13) == [(OOO, 11), (OOO, 11)]
        # A producer the leader does not know starts at 0 or with the flag.
        results = await c.produce(
            "q", 0, _msgs(5), ack_policy=AckPolicy.ALL, producer_id=8, base_seq=5
        )
        assert [(r.error_code, r.offset) for r in results] == [(OOO, -1)]
        records = await c.collect("q", 0, 7)
        _h, extra = await c.fetch("q", 0, 7, max_wait_ms=200)
        # What the server published for its first two requests: each message marked.
        marks = [(await seen.next_msg(timeout=10)).headers for _ in range(4)]
        await nc.close()
    assert [(r.producer_id, r.producer_seq) for r in records] == [
        (7, 0),
        (7, 1),
        (7, 2),
        (7, 3),
        (7, 4),
        (7, 5),
        (7, 10),
    ]
    assert extra == []
    assert marks == [{"Jet-Seq": "next"}] * 4  # (sequence_start not set on them)


async def test_a_plain_nats_publisher_is_not_checked(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """No ``Jet-Seq`` mark (an application publishing envelopes itself): stored as before,
    a skipped sequence included (it has no way to say where its sequence starts)."""
    async with (
        running_server(nats_server.url, tmp_path / "data") as jet,
        await RawClient.connect(jet.address) as c,
    ):
        await c.create_stream(name="p", subject="p")
        nc = await nats.connect(nats_server.url)
        try:
            for seq in (0, 3, 1):
                payload = build_message(
                    b"p%d" % seq,
                    ack_inbox="_INBOX.unread",
                    ack_policy=AckPolicy.LEADER,
                    producer_id=9,
                    producer_seq=seq,
                )
                await nc.publish("p", payload)
            await nats_flushed(nc)
        finally:
            await nc.close()
        records = await c.collect("p", 0, 3)
    assert [r.producer_seq for r in records] == [0, 3, 1]
