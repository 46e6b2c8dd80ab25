"""Share groups against a real `jet dev`: no delivery is counted for a message the application
never saw (spec/share-groups.md §5 "Pacing", §7), dead letters say why (§6), and close() gives
back at once what it never handed out (§5 "Leaving").

Plain functions running ``anyio.run`` (asyncio): they are about timing against the server,
not the backend."""

from __future__ import annotations

import time

import anyio
import attrs

from jetsdk import Client, Producer, ShareConsumer
from jetsdk.codec.record import iter_records
from jetsdk.consumer.share_consumer import LostOutcome, read_share_group
from jetsdk.errors import StreamNotFound
from support.jet_dev import JetDev
from support.names import unique


async def fill(client: Client, stream: str, count: int) -> None:
    await client.create_stream(stream, stream)
    async with Producer(client, stream, linger=0.002) as producer:
        for i in range(count):
            await producer.send_soon(b"v%d" % i)


async def dead_letters(client: Client, dlq: str) -> list[dict[str, bytes]]:
    try:
        end = (await client.list_offsets(dlq, 0, "latest")).hw
    except StreamNotFound:
        return []
    out: list[dict[str, bytes]] = []
    offset = 0
    while offset < end:
        _, raw = await client.fetch(dlq, 0, offset, max_bytes=1 << 22, max_wait=0.0)
        records = list(iter_records(raw))
        if not records:
            break
        out.extend(dict(r.headers) for r in records)
        offset = records[-1].offset + 1
    return out


@attrs.define
class Seen:
    counts: dict[int, list[int]] = attrs.field(factory=dict)

    def add(self, offset: int, count: int) -> None:
        self.counts.setdefault(offset, []).append(count)


def test_slow_consumer_counts_only_what_it_handed_out(jet_dev: JetDev) -> None:
    """10 ms per message, a 3 s deadline, 3 deliveries, 2,000 messages, two members: every
    message's delivery_count is the number of times it was handed out (1, 2, ...: never a
    count for a lease it was not handed out in), and nothing is dead-lettered (before, a
    fixed prefetch of 4 x 200 plus a ready queue of 400 outlived the lease). A message is
    handed out again only after an ack that came too late (reported lost: a loaded machine
    can delay a settle past the deadline)."""
    stream, group, dlq, count = unique("slow"), unique("g"), unique("dlq"), 2000
    seen = Seen()
    lost: list[LostOutcome] = []

    async def worker(client: Client, done: anyio.Event) -> None:
        async with ShareConsumer(
            client,
            stream,
            group=group,
            ack_deadline=3.0,
            max_deliveries=3,
            dead_letter_stream=dlq,
            on_lost=lost.extend,
        ) as consumer:
            while not done.is_set():
                msg = await consumer.next(timeout=0.2)
                if msg is None:
                    continue
                seen.add(msg.offset, msg.delivery_count)
                await anyio.sleep(0.01)  # the work
                msg.ack()
                if len(seen.counts) >= count:
                    done.set()
            await consumer.flush()

    async def main() -> None:
        async with Client(jet_dev.servers) as client:
            await fill(client, stream, count)
            done = anyio.Event()
            with anyio.fail_after(100):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(worker, client, done)
                    tg.start_soon(worker, client, done)
            state = await read_share_group(client, group)
            assert state is not None
            ps = state.partition(stream, 0)
            assert (ps.acked_total, ps.dead_total) == (count, 0)
            assert await dead_letters(client, dlq) == []

    anyio.run(main)
    assert sorted(seen.counts) == list(range(count))
    assert all(c == list(range(1, len(c) + 1)) for c in seen.counts.values())
    again = {o for o, c in seen.counts.items() if len(c) > 1}
    assert again <= {x.offset for x in lost}
    assert len(again) < count // 20  # rare: a settle delayed past its deadline


def test_stuck_consumer_burns_no_deliveries_for_messages_it_never_saw(
    jet_dev: JetDev,
) -> None:
    """A member that takes one message and then is stuck on it for 2.5 deadlines: the other
    messages it had acquired come back with their count unchanged; only the message it held
    through the lease counts twice."""
    stream, group, count = unique("stuck"), unique("g"), 300
    seen = Seen()
    lost: list[LostOutcome] = []

    async def main() -> tuple[int, int]:
        async with Client(jet_dev.servers) as client:
            await fill(client, stream, count)
            async with ShareConsumer(client, stream, group=group, ack_deadline=2.0) as stuck:
                held = await stuck.next(timeout=30)
                assert held is not None
                assert held.delivery_count == 1
                async with ShareConsumer(
                    client, stream, group=group, ack_deadline=2.0, on_lost=lost.extend
                ) as other:
                    with anyio.fail_after(60):
                        while len(seen.counts) < count:
                            msg = await other.next(timeout=1)
                            if msg is not None:
                                seen.add(msg.offset, msg.delivery_count)
                                msg.ack()
                    await other.flush()
                return stuck.given_back, held.offset

    given_back, held_offset = anyio.run(main)
    assert sorted(seen.counts) == list(range(count))
    # The message held through its lease counts twice (it was handed out, and ran out)...
    assert seen.counts.pop(held_offset) == [2]
    # ... the others once per hand-out: the stuck member's acquisitions did not count. (A
    # second hand-out only follows an ack reported lost, on a loaded machine.)
    assert all(c == list(range(1, len(c) + 1)) for c in seen.counts.values())
    assert {o for o, c in seen.counts.items() if len(c) > 1} <= {x.offset for x in lost}
    assert given_back >= 1  # it gave back what it had acquired and not handed out


def test_reject_late_in_the_lease_is_dead_lettered_as_rejected(jet_dev: JetDev) -> None:
    """Rejected 1.9 s into a 2 s lease: the settle lands near the deadline, so the dead letter
    is written by the next holder; it says ``rejected`` with count 1 (it said
    ``max_deliveries``)."""
    stream, group, dlq = unique("late"), unique("g"), unique("dlq")

    async def main() -> list[dict[str, bytes]]:
        async with Client(jet_dev.servers) as client:
            await fill(client, stream, 1)
            async with ShareConsumer(
                client, stream, group=group, ack_deadline=2.0, batch=1, dead_letter_stream=dlq
            ) as consumer:
                msg = await consumer.next(timeout=30)
                assert msg is not None
                await anyio.sleep(1.9)
                msg.reject()
                with anyio.fail_after(30):
                    while True:
                        await consumer.flush()
                        state = await read_share_group(client, group)
                        assert state is not None
                        if state.partition(stream, 0).dead_total == 1:
                            break
                        await anyio.sleep(0.1)
            return await dead_letters(client, dlq)

    (letter,) = anyio.run(main)
    assert letter["Jet-Share-Reason"] == b"rejected"
    assert letter["Jet-Share-Delivery-Count"] == b"1"


def test_close_gives_back_what_it_never_handed_out_at_once(jet_dev: JetDev) -> None:
    """A member with a 10 s deadline takes 5 of 50 messages, acks 4, and closes: the next
    member gets the 45 it never handed out within 3 s (not after the deadline), each with
    delivery_count 1, and the unacked one with 2."""
    stream, group = unique("close"), unique("g")
    seen = Seen()

    async def main() -> float:
        async with Client(jet_dev.servers) as client:
            await fill(client, stream, 50)
            async with ShareConsumer(client, stream, group=group, ack_deadline=10.0) as first:
                for i in range(5):
                    msg = await first.next(timeout=30)
                    assert msg is not None
                    if i < 4:
                        msg.ack()
                    else:
                        unacked = msg.offset
            closed = time.monotonic()
            async with ShareConsumer(client, stream, group=group, ack_deadline=10.0) as second:
                with anyio.fail_after(30):
                    while len(seen.counts) < 46:
                        msg = await second.next(timeout=1)
                        if msg is not None:
                            seen.add(msg.offset, msg.delivery_count)
                            msg.ack()
                took = time.monotonic() - closed
                await second.flush()
            assert seen.counts.pop(unacked) == [2]
            return took

    took = anyio.run(main)
    assert took < 3.0
    assert len(seen.counts) == 45
    assert all(c == [1] for c in seen.counts.values())
