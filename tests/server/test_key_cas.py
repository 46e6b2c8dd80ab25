"""Per-key compare-and-set at append (``Jet-Expected-Key-Offset``, issue 38 item 2) on a
real `jet dev` process: Produce messages and plain NATS requests, racing writers, refusals
naming the current offset, create-if-absent, deletes, bad values, and the index surviving a
restart (rebuilt from the log)."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest
from nats.aio.client import Client as NatsClient

from jetsdk import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.record import iter_records
from support.jet_dev import JetDev
from support.names import unique

pytestmark = pytest.mark.anyio

HEADER = "Jet-Expected-Key-Offset"
WRITERS = 4
INCREMENTS = 12


async def cas(
    client: Client, stream: str, key: bytes, value: bytes, expected: int
) -> tuple[int, int]:
    """One Produce message with the header; (error code, offset)."""
    msg = ProduceMessage(value=value, key=key, headers=((HEADER, str(expected).encode()),))
    request = ProduceRequest(stream, 0, AckPolicy.ALL, 5000, (msg,))
    (result,) = await client.produce(request)
    return result.error_code, result.offset


async def value_at(client: Client, stream: str, offset: int) -> bytes:
    _header, data = await client.fetch(stream, 0, offset, max_bytes=1 << 16, max_wait=1.0)
    record = next(iter_records(data))
    assert record.offset == offset
    return record.value


async def test_racing_writers_lose_no_update(jet_dev: JetDev) -> None:
    """4 writers each add 1 to a counter 12 times by read-modify-CAS. A refusal names the
    current offset; the writer reads the value there and tries again. Every acknowledged
    increment must be in the final value: with the check gone, writers overwrite each
    other's increments and the final value falls short of the increments acknowledged."""
    stream = unique("race")
    key = b"counter"
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        code, first = await cas(client, stream, key, b"0", -1)
        assert code == ErrorCode.NONE
        refusals = 0

        async def writer() -> None:
            nonlocal refusals
            rev, value = first, 0
            done = 0
            for _attempt in range(INCREMENTS * WRITERS * 4):
                if done == INCREMENTS:
                    return
                code, offset = await cas(client, stream, key, str(value + 1).encode(), rev)
                if code == ErrorCode.NONE:
                    rev, value, done = offset, value + 1, done + 1
                    continue
                assert code == ErrorCode.WRONG_EXPECTED_KEY_OFFSET, code
                assert offset > rev  # the refusal names the key's current offset
                refusals += 1
                rev, value = offset, int(await value_at(client, stream, offset))
            raise AssertionError("a writer could not make its increments")

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for _ in range(WRITERS):
                    tg.start_soon(writer)
        hw = (await client.list_offsets(stream, 0)).hw
        last = int(await value_at(client, stream, hw - 1))
    lost = WRITERS * INCREMENTS - last
    assert lost == 0, f"{lost} lost updates"
    assert refusals > 0  # the writers did race


async def test_refusal_names_current_offset_and_create_delete(jet_dev: JetDev) -> None:
    stream = unique("refuse")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        assert await cas(client, stream, b"k", b"v1", -1) == (ErrorCode.NONE, 0)
        # create-if-absent again: refused, naming the offset the key is at
        assert await cas(client, stream, b"k", b"v2", -1) == (
            ErrorCode.WRONG_EXPECTED_KEY_OFFSET,
            0,
        )
        assert await cas(client, stream, b"k", b"v2", 5) == (ErrorCode.WRONG_EXPECTED_KEY_OFFSET, 0)
        assert await cas(client, stream, b"other", b"x", -1) == (ErrorCode.NONE, 1)
        assert await cas(client, stream, b"k", b"v2", 0) == (ErrorCode.NONE, 2)
        # a tombstone (empty value) deletes: the key is absent again
        assert await cas(client, stream, b"k", b"", 2) == (ErrorCode.NONE, 3)
        assert await cas(client, stream, b"k", b"v3", 3) == (
            ErrorCode.WRONG_EXPECTED_KEY_OFFSET,
            -1,
        )
        assert await cas(client, stream, b"k", b"v3", -1) == (ErrorCode.NONE, 4)
        # bad values and a message without a key: INVALID_ARGUMENT, nothing stored
        assert (await cas(client, stream, b"k", b"x", -2))[0] == ErrorCode.INVALID_ARGUMENT
        msg = ProduceMessage(value=b"x", headers=((HEADER, b"4"),))
        (res,) = await client.produce(ProduceRequest(stream, 0, AckPolicy.ALL, 5000, (msg,)))
        assert res.error_code == ErrorCode.INVALID_ARGUMENT
        assert (await client.list_offsets(stream, 0)).hw == 5


async def test_plain_requests_and_one_batch(jet_dev: JetDev) -> None:
    """Plain NATS requests: the JSON ack of a refusal carries ``key_offset``; two requests
    with the same expectation published back to back (one batch, most likely) store one."""
    stream = unique("plain")
    async with Client(jet_dev.servers) as client:
        await client.create_stream(stream, compact=True)
        plain = unique("flat")
        await client.create_stream(plain)
    nc = NatsClient()
    await nc.connect(jet_dev.nats_url)
    try:

        async def request(subject: str, payload: bytes, expected: str, key: str = "k") -> Any:
            headers = {"Jet-Key": key, HEADER: expected, "Jet-Ack": "all"}
            reply = await nc.request(subject, payload, timeout=10, headers=headers)
            return orjson.loads(reply.data)

        assert (await request(stream, b"a", "-1"))["offset"] == 0
        wrong = await request(stream, b"b", "-1")
        assert wrong["error"]["name"] == "WRONG_EXPECTED_KEY_OFFSET"
        assert wrong["error"]["key_offset"] == 0
        bad = await request(stream, b"b", "x1")
        assert bad["error"]["name"] == "INVALID_ARGUMENT"
        flat = await request(plain, b"b", "-1")
        assert flat["error"]["name"] == "INVALID_ARGUMENT"
        assert "compacted" in flat["error"]["description"]
        for round_ in range(5):
            answers: list[Any] = []

            async def one(value: bytes, key: str, into: list[Any]) -> None:
                into.append(await request(stream, value, "-1", key))

            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(one, f"{round_}-{i}".encode(), f"r{round_}", answers)
            assert sum("offset" in a for a in answers) == 1, answers
    finally:
        await nc.close()
