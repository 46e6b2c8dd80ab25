"""CLI tests run `jet` as a subprocess against the worker's `jet dev` (or the package's
3-server ``dev3``); the console tests share a `jet console` and its traffic."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import anyio
import attrs
import orjson
import pytest

from jetsdk import AckPolicy, Client, Consumer, Producer, StreamPartition
from jetsdk.consumer.group_admin import commit_offsets
from jetserver.testing import wait_until
from support.jet_console import JetConsole
from support.jet_dev import JetDev

MEMBER_BOUND_S = 120.0


@pytest.fixture(scope="package")
def dev3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JetDev]:
    """`jet dev --servers 3`, shared by the tests of jet bench, jet top and jet console."""
    with JetDev.start(tmp_path_factory.mktemp("jet-dev3") / "data", servers=3) as dev:
        yield dev


@attrs.define
class Traffic:
    """What the console tests sent (see the ``traffic`` fixture)."""

    partition0: list[dict[str, str]]
    """Records of conA partition 0 in offset order: key, value, header h."""
    binary_offset: int
    """Offset of the binary record on partition 0."""
    middle_ns: int
    """A time between the two halves of partition 0's records."""
    middle_offset0: int
    """The first offset of partition 0 at or after middle_ns."""


@pytest.fixture(scope="package")
def console(dev3: JetDev) -> Iterator[JetConsole]:
    """A read-only `jet console` on dev3."""
    with JetConsole.start(dev3) as running:
        yield running


async def _produce(servers: list[str], first: int, count: int) -> None:
    async with Client(servers) as client, Producer(client, "conA", ack=AckPolicy.ALL) as producer:
        for i in range(first, first + count):
            await producer.send_soon(
                orjson.dumps({"n": i}), f"k{i}".encode(), [("h", f"v{i}")], partition=i % 2
            )
            await anyio.sleep(0.01)  # spread over samples: the in rate shows
        await producer.flush()


async def _member(servers: list[str], ready: threading.Event, stop: threading.Event) -> None:
    async with (
        Client(servers) as client,
        Consumer(client, "conA", group="conGrp", auto_commit=None) as consumer,
    ):
        got = 0
        with anyio.fail_after(MEMBER_BOUND_S):
            while got < 10:
                got += len(await consumer.fetch(max_records=10 - got, timeout=1.0))
        await consumer.commit()
        ready.set()
        await anyio.to_thread.run_sync(stop.wait, MEMBER_BOUND_S)  # hold the membership


def _wait_console_sees(console: JetConsole, stream: str) -> None:
    def shown() -> bool:
        streams = console.get("/api/streams")["streams"]
        return any(s["name"] == stream and s["partition_rows"][0]["hw"] == 0 for s in streams)

    wait_until(shown, MEMBER_BOUND_S, f"the console shows {stream}", interval_s=0.1)


@pytest.fixture(scope="package")
def traffic(dev3: JetDev, console: JetConsole) -> Iterator[Traffic]:
    """conA (2 partitions, RF 3) with keyed JSON records with a header, one binary record,
    a live group conGrp (one member, committed), an idle group conIdle; produced while the
    console samples."""

    async def setup() -> Traffic:
        async with Client(dev3.servers) as client:
            await client.create_stream(
                "conA", partitions=2, replication_factor=3, retention_max_messages=100_000
            )
        # Produce only once the console has sampled the empty stream: its in rate is then
        # measured from HW 0 whatever the machine's load.
        await anyio.to_thread.run_sync(_wait_console_sees, console, "conA")
        await _produce(dev3.servers, 0, 40)
        middle_ns = time.time_ns()
        await anyio.sleep(0.05)
        await _produce(dev3.servers, 40, 40)
        async with Client(dev3.servers) as client:
            async with Producer(client, "conA", ack=AckPolicy.ALL) as producer:
                ack = await producer.send(b"\x00\xff\x10", partition=0)
            middle = await client.list_offsets("conA", 0, middle_ns)
            await commit_offsets(client, "conIdle", {StreamPartition("conA", 0): 7})
        records = [
            {"key": f"k{i}", "value": orjson.dumps({"n": i}).decode(), "h": f"v{i}"}
            for i in range(0, 80, 2)
        ]
        return Traffic(records, ack.offset, middle_ns, middle.offset)

    sent = anyio.run(setup)
    ready, stop = threading.Event(), threading.Event()
    member = threading.Thread(
        target=anyio.run, args=(_member, dev3.servers, ready, stop), name="conGrp-member"
    )
    member.start()
    try:
        assert ready.wait(MEMBER_BOUND_S), "the group member did not start"
        yield sent
    finally:
        stop.set()
        member.join(MEMBER_BOUND_S)
