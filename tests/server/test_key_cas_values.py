"""A refused compare-and-set carrying the key's current value (spec/protocol.md §6,
"current values") on a real `jet dev` process: only when the request asks (old clients get
the bytes they always got), the value at the offset named (also a record of the same
request), none for an absent key, and at most 1 MiB of values per response."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jetsdk import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, ProduceResult
from jetserver.broker.append_checks import AppendChecks
from jetserver.broker.current_values import MAX_CURRENT_VALUE_BYTES
from support.jet_dev import JetDev
from support.jet_server import running_server
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

HEADER = "Jet-Expected-Key-Offset"
REFUSED = ErrorCode.WRONG_EXPECTED_KEY_OFFSET
_names = itertools.count()


def cas(key: bytes, value: bytes, expected: int | None) -> ProduceMessage:
    headers = () if expected is None else ((HEADER, str(expected).encode()),)
    return ProduceMessage(value=value, key=key, headers=headers)


async def produce(
    client: Client, stream: str, *messages: ProduceMessage, values: bool = True
) -> list[ProduceResult]:
    request = ProduceRequest(stream, 0, AckPolicy.ALL, 5000, messages, current_values=values)
    return await client.produce(request)


async def test_refusal_carries_the_value_only_when_asked(jet_dev: JetDev) -> None:
    stream = f"casval{next(_names)}"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        (ok,) = await produce(client, stream, cas(b"k", b"v1", -1))
        assert (ok.error_code, ok.offset) == (ErrorCode.NONE, 0)
        (refused,) = await produce(client, stream, cas(b"k", b"v2", 7))
        assert (refused.error_code, refused.offset, refused.current_value) == (REFUSED, 0, b"v1")
        (old,) = await produce(client, stream, cas(b"k", b"v2", 7), values=False)
        assert (old.error_code, old.offset, old.current_value) == (REFUSED, 0, None)
        # a put and a compare-and-set on its key in one request: the value just appended
        put, behind, other = await produce(
            client, stream, cas(b"k", b"v3", None), cas(b"k", b"v4", 0), cas(b"x", b"y", -1)
        )
        assert (put.error_code, put.offset) == (ErrorCode.NONE, 1)
        assert (behind.error_code, behind.offset, behind.current_value) == (REFUSED, 1, b"v3")
        assert (other.error_code, other.offset, other.current_value) == (ErrorCode.NONE, 2, None)
        # deleted: no value, offset -1
        (tomb,) = await produce(client, stream, cas(b"k", b"", None))
        assert tomb.error_code == ErrorCode.NONE
        (gone,) = await produce(client, stream, cas(b"k", b"v5", 1))
        assert (gone.error_code, gone.offset, gone.current_value) == (REFUSED, -1, None)


async def test_values_of_one_response_are_bounded(jet_dev: JetDev) -> None:
    stream = f"casbig{next(_names)}"
    size = MAX_CURRENT_VALUE_BYTES * 4 // 10  # two fit in a response, three do not
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        for i in range(3):
            (ok,) = await produce(client, stream, cas(b"k%d" % i, bytes([65 + i]) * size, -1))
            assert (ok.error_code, ok.offset) == (ErrorCode.NONE, i)
        results = await produce(client, stream, *(cas(b"k%d" % i, b"new", 9) for i in range(3)))
        assert [(r.error_code, r.offset) for r in results] == [(REFUSED, i) for i in range(3)]
        assert [r.current_value for r in results] == [b"A" * size, b"B" * size, None]


async def test_through_nats_the_refusal_has_no_value(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """With ``[ingest] produce_direct = false`` the request goes through NATS and the
    envelope ack carries no value: the refusal names the offset, its value is -1."""
    async with (
        running_server(nats_server.url, tmp_path / "data", ingest__produce_direct=False) as server,
        Client([server.address]) as client,
    ):
        await client.create_stream("vianats", compact=True)
        (ok,) = await produce(client, "vianats", cas(b"k", b"v1", -1))
        assert (ok.error_code, ok.offset) == (ErrorCode.NONE, 0)
        (refused,) = await produce(client, "vianats", cas(b"k", b"v2", 5))
        assert (refused.error_code, refused.offset, refused.current_value) == (REFUSED, 0, None)


@contextlib.asynccontextmanager
async def contended(
    nats_server: NatsServer, tmp_path: Path, stream: str
) -> AsyncIterator[tuple[Client, AppendChecks]]:
    """A server alone (messages up to 1000 bytes) with the compacted stream ``stream``: a
    client and the checks of its partition 0."""
    async with (
        running_server(
            nats_server.url, tmp_path / "data", limits__max_message_bytes=1000
        ) as server,
        Client([server.address]) as client,
    ):
        await client.create_stream(stream, compact=True)
        yield client, server.streams.local_replica(stream, 0).sequencer.checks


async def test_a_lost_compare_and_set_is_answered_at_once(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Once a compare-and-set lost on a partition (writers race there), a lone refused one
    with the values flag is answered before any append (``refused_at_once``), with the
    refusal and value the append would give; what another check settles first still gets
    that answer: the retry of a stored one is its duplicate (not refused by its own
    success), one too large is MESSAGE_TOO_LARGE."""
    async with contended(nats_server, tmp_path, "atonce") as (client, checks):

        async def send(message: ProduceMessage, seq: int) -> ProduceResult:
            request = ProduceRequest(
                "atonce", 0, AckPolicy.ALL, 5000, (message,), 77, seq, current_values=True
            )
            (result,) = await client.produce(request)
            return result

        ok = await send(cas(b"k", b"v1", -1), 0)
        assert (ok.error_code, ok.offset, checks.refused_at_once) == (ErrorCode.NONE, 0, 0)
        first = await send(cas(b"k", b"v2", -1), 1)  # no race seen yet: through the append
        assert (first.error_code, first.offset, first.current_value) == (REFUSED, 0, b"v1")
        assert checks.refused_at_once == 0
        lost = await send(cas(b"k", b"v2", 7), 2)
        assert (lost.error_code, lost.offset, lost.current_value) == (REFUSED, 0, b"v1")
        assert checks.refused_at_once == 1
        again = await send(cas(b"k", b"v1", -1), 0)  # the first one's retry
        assert (again.error_code, again.offset) == (ErrorCode.DUPLICATE_SEQUENCE, 0)
        big = await send(cas(b"k", b"x" * 2000, 5), 3)
        assert big.error_code == ErrorCode.MESSAGE_TOO_LARGE
        won = await send(cas(b"k", b"v3", 0), 4)
        assert (won.error_code, won.offset) == (ErrorCode.NONE, 1)
        assert checks.refused_at_once == 1


async def test_a_won_compare_and_set_carries_the_later_record(jet_dev: JetDev) -> None:
    """With the latest-values flag (bit 3) a success result names its key's later record
    when one was appended after it before the answer (here: a compare-and-set built on it in
    the same request), with that record's value; -1 when the key is still at the record,
    was deleted since, or the request did not ask (then the answer is as before)."""
    stream = f"caslatest{next(_names)}"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)

        async def send(*messages: ProduceMessage, latest: bool = True) -> list[ProduceResult]:
            request = ProduceRequest(
                stream, 0, AckPolicy.ALL, 5000, messages, current_values=True, latest_values=latest
            )
            return await client.produce(request)

        (alone,) = await send(cas(b"k", b"v1", -1))
        assert (alone.error_code, alone.offset, alone.latest_offset) == (ErrorCode.NONE, 0, -1)
        assert alone.current_value is None
        first, second, other = await send(
            cas(b"k", b"v2", 0), cas(b"k", b"v3", 1), cas(b"x", b"y", -1)
        )
        assert (first.error_code, first.offset) == (ErrorCode.NONE, 1)
        assert (first.latest_offset, first.current_value) == (2, b"v3")
        assert (second.error_code, second.offset, second.latest_offset) == (ErrorCode.NONE, 2, -1)
        assert (other.error_code, other.offset, other.latest_offset) == (ErrorCode.NONE, 3, -1)
        stored, refused, deleted = await send(
            cas(b"k", b"v4", 2), cas(b"k", b"v5", 2), cas(b"k", b"", None)
        )
        assert (stored.error_code, stored.offset, stored.latest_offset) == (ErrorCode.NONE, 4, -1)
        assert (refused.error_code, refused.offset, refused.current_value) == (REFUSED, 4, b"v4")
        assert (deleted.error_code, deleted.offset, deleted.latest_offset) == (
            ErrorCode.NONE,
            5,
            -1,
        )
        won, built = await send(cas(b"k", b"v6", -1), cas(b"k", b"v7", 6), latest=False)
        assert (won.error_code, won.offset, won.latest_offset) == (ErrorCode.NONE, 6, -1)
        assert (built.error_code, built.offset) == (ErrorCode.NONE, 7)


async def test_a_plain_lost_compare_and_set_is_answered_from_its_bytes(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A lost compare-and-set whose message is plain (no subject, one header) is refused
    from the request's bytes alone (``refused_lean``), with the answer the general path
    gives a message that is not plain (here: a TTL header too); a too large one, or one
    not refused, still takes the general path."""
    async with contended(nats_server, tmp_path, "lean") as (client, checks):

        async def send(message: ProduceMessage) -> ProduceResult:
            (result,) = await produce(client, "lean", message)
            return result

        assert (await send(cas(b"k", b"v1", -1))).error_code == ErrorCode.NONE
        first = await send(cas(b"k", b"v2", -1))  # no race seen yet: through the append
        assert (first.error_code, first.offset, first.current_value) == (REFUSED, 0, b"v1")
        assert (checks.refused_at_once, checks.refused_lean) == (0, 0)
        lean = await send(cas(b"k", b"v2", 7))
        assert (lean.error_code, lean.offset, lean.current_value) == (REFUSED, 0, b"v1")
        assert (checks.refused_at_once, checks.refused_lean) == (1, 1)
        ttl = ProduceMessage(value=b"v2", key=b"k", headers=((HEADER, b"7"), ("Jet-TTL", b"9")))
        general = await send(ttl)
        assert (general.error_code, general.offset, general.current_value) == (REFUSED, 0, b"v1")
        assert (checks.refused_at_once, checks.refused_lean) == (2, 1)
        absent = await send(cas(b"other", b"v", 3))
        assert (absent.error_code, absent.offset, absent.current_value) == (REFUSED, -1, None)
        assert (checks.refused_at_once, checks.refused_lean) == (3, 2)
        big = await send(cas(b"k", b"x" * 2000, 5))
        assert big.error_code == ErrorCode.MESSAGE_TOO_LARGE
        won = await send(cas(b"k", b"v3", 0))
        assert (won.error_code, won.offset) == (ErrorCode.NONE, 1)
        lost = await send(cas(b"k", b"v4", 0))
        assert (lost.error_code, lost.offset, lost.current_value) == (REFUSED, 1, b"v3")
        assert (checks.refused_at_once, checks.refused_lean) == (4, 3)
