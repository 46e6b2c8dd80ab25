"""The sync producer's send queue: thread-safe, ordered, checked on the caller's thread,
drained by flush and by closing, its handles usable from any thread."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from jetsdk import sync
from jetsdk._sync_sends import QueuedSends
from jetsdk.errors import MessageTooLarge, PartitionNotFound
from jetserver.testing import wait_until
from support.jet_dev import JetDev

THREADS = 8
PER_THREAD = 200


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_one_producer_shared_by_eight_threads(jet_dev: JetDev) -> None:
    name = _name("share")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name, partitions=3)
        handles: dict[int, list[sync.SendHandle]] = {}
        with sync.Producer(client, name, max_pending=50) as producer:
            start = threading.Barrier(THREADS)

            def work(t: int) -> None:
                start.wait(10)
                handles[t] = [
                    producer.send_soon(b"%d:%d" % (t, i), key=b"t%d" % t) for i in range(PER_THREAD)
                ]

            threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            producer.flush()
            assert all(h.done() for hs in handles.values() for h in hs)
        acks = {t: [h.result(timeout=0) for h in hs] for t, hs in handles.items()}
        with sync.Consumer(client, name, start="earliest") as consumer:
            stored = consumer.fetch(max_records=THREADS * PER_THREAD, timeout=10)
            while len(stored) < THREADS * PER_THREAD:
                more = consumer.fetch(max_records=THREADS * PER_THREAD, timeout=10)
                assert more, f"only {len(stored)} stored"
                stored += more
    values = sorted(m.value for m in stored)
    assert values == sorted(b"%d:%d" % (t, i) for t in range(THREADS) for i in range(PER_THREAD))
    for t, thread_acks in acks.items():
        # One key per thread: one partition, and offsets in the order the thread sent.
        assert len({a.partition for a in thread_acks}) == 1
        offsets = [a.offset for a in thread_acks]
        assert offsets == sorted(offsets), f"thread {t} reordered"


def test_an_ack_wakes_no_sender_when_none_waits_for_room(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ack frees a ``max_pending`` slot; a sender waiting for one is woken, but with
    none waiting the ack notifies nobody (Condition.notify is about 0.35 us of Python per
    message on the loop thread, the sync API's own cost over the async one)."""
    name = _name("room")
    notified: list[object] = []
    real = threading.Condition.notify

    def counting(self: threading.Condition, n: int = 1) -> None:
        notified.append(self)
        real(self, n)

    monkeypatch.setattr(threading.Condition, "notify", counting)
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Producer(client, name) as producer:
            handles = [producer.send_soon(b"m%d" % i) for i in range(100)]
            producer.flush()
            room = producer._queued()._room  # the sync queue's slots
            assert all(h.done() for h in handles)
    assert [c for c in notified if c is room] == []


def test_send_soon_blocks_at_max_pending_bytes_until_acks_free_room(jet_dev: JetDev) -> None:
    """The sync queue counts ``max_pending_bytes`` on the callers' side too: with nothing
    sent before a flush (linger), the caller blocks once the bytes pending reach it."""
    name = _name("bytes")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Producer(client, name, linger=60, max_pending_bytes=1000) as producer:
            # The queue exists (not `send`: a sync send waits for its ack, so out the
            # 60 s linger, as a send_soon's result() does; flush ignores the linger).
            producer.send_soon(b"first")
            producer.flush()
            sends = producer._queued()
            queued: list[sync.SendHandle] = []

            def work() -> None:
                for i in range(8):
                    queued.append(producer.send_soon(b"%03d" % i + b"x" * 197))

            thread = threading.Thread(target=work)
            thread.start()
            wait_until(lambda: sends.waiting == 1, 10, "the sender waiting for room")
            assert len(queued) == 5  # about 216 bytes each: 4 below 1000, a fifth; full
            producer.flush()  # acks free the room: the rest go
            thread.join(10)
            assert not thread.is_alive()
            producer.flush()
        assert [h.result(0).offset for h in queued] == list(range(1, 9))


def test_bad_messages_fail_on_the_callers_thread(jet_dev: JetDev) -> None:
    name = _name("bad")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Producer(client, name) as producer:
            with pytest.raises(TypeError):
                producer.send_soon(42)  # type: ignore[arg-type]
            with pytest.raises(PartitionNotFound):
                producer.send_soon(b"x", partition=5)
            with pytest.raises(MessageTooLarge):
                producer.send_soon(b"x" * (2 << 20))
            ack = producer.send(b"fine")  # the producer goes on
    assert ack.offset == 0


def test_closing_sends_what_is_queued_and_handles_work_from_any_thread(
    jet_dev: JetDev,
) -> None:
    name = _name("close")
    seen: list[int] = []
    done = threading.Event()
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Producer(client, name, linger=0.5) as producer:
            handles = [producer.send_soon(b"%d" % i) for i in range(100)]
            handles[-1].add_done_callback(lambda h: (seen.append(1), done.set()))
        # Left the block at once: closing drained the queue and flushed the producer.
        assert all(h.done() for h in handles)
        results: list[int] = []
        waiter = threading.Thread(target=lambda: results.append(handles[50].result(5).offset))
        waiter.start()
        waiter.join(10)
        assert done.wait(5)
    assert [h.result(0).offset for h in handles] == list(range(100))
    assert results == [50]
    assert seen == [1]


class _PortalCalls:
    """Counts the sync producer's blocking round trips to its loop thread (``call`` goes
    through ``start_task_soon``, which waits until the loop has spawned the task)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = BlockingPortal.start_task_soon
        monkeypatch.setattr(BlockingPortal, "start_task_soon", self._counting(real))

    def _counting(self, real: Any) -> Any:
        def counted(portal: BlockingPortal, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(portal, *args, **kwargs)

        return counted


def _drain_wakes(producer: sync.Producer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per wake of ``producer``'s drain task from here on (its queue must exist:
    send one message first)."""
    sends = producer._queued()
    wakes: list[int] = []
    real_wake = sends._wake_drain
    monkeypatch.setattr(sends, "_wake_drain", lambda: (wakes.append(1), real_wake()))
    return wakes


def test_send_soon_wakes_the_loop_once_per_drain_without_a_round_trip(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many ``send_soon`` calls hand their messages over in a few fire-and-forget wake-ups
    of the loop's drain task; the caller never waits for the loop thread to take them (a
    portal ``start_task_soon`` waited for the task to be spawned, a round trip)."""
    name = _name("wakes")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Producer(client, name) as producer:
            producer.send(b"first")  # the queue and its drain task exist
            wakes = _drain_wakes(producer, monkeypatch)
            calls = _PortalCalls(monkeypatch)
            handles = [producer.send_soon(b"m%d" % i) for i in range(2000)]
            assert calls.count == 0
            producer.flush()
            assert calls.count == 1  # flush itself
            assert all(h.done() for h in handles)
    assert 1 <= len(wakes) <= 500, len(wakes)


def test_send_is_one_wake_each_way_without_a_round_trip(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocking ``send`` wakes the loop once (the drain task) and is woken once (its
    handle's lock): no portal round trip per message."""
    name = _name("send")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Producer(client, name, linger=0) as producer:
            producer.send(b"first")
            wakes = _drain_wakes(producer, monkeypatch)
            calls = _PortalCalls(monkeypatch)
            acks = [producer.send(b"m%d" % i) for i in range(20)]
            assert calls.count == 0
    assert [a.offset for a in acks] == list(range(1, 21))
    assert len(wakes) == 20


def test_threads_sending_first_at_once_share_one_queue(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The send queue is made once per producer even when several threads send their first
    message at the same moment (with one queue each, ``flush`` missed the others')."""
    name = _name("first")
    made: list[object] = []
    second = threading.Event()
    real_init = QueuedSends.__init__

    def slow_init(self: QueuedSends, *args: Any) -> None:
        made.append(self)
        if len(made) > 1:
            second.set()
        second.wait(0.5)  # widen the window in which another thread could make one too
        real_init(self, *args)

    monkeypatch.setattr(QueuedSends, "__init__", slow_init)
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Producer(client, name) as producer:
            start = threading.Barrier(4)
            handles: list[sync.SendHandle] = []

            def work() -> None:
                start.wait(10)
                handles.append(producer.send_soon(b"x"))

            threads = [threading.Thread(target=work) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            producer.flush()
            assert all(h.done() for h in handles)
    assert len(made) == 1
    assert len(handles) == 4


def test_the_hand_off_works_on_a_trio_loop_thread(jet_dev: JetDev) -> None:
    """The drain task's wake-up is trio's ``run_sync_soon`` there (asyncio's
    ``call_soon_threadsafe`` elsewhere)."""
    name = _name("trio")
    with sync.Client(jet_dev.servers, backend="trio") as client:
        client.create_stream(name, name)
        with sync.Producer(client, name, linger=0) as producer:
            handles = [producer.send_soon(b"%d" % i) for i in range(300)]
            producer.flush()
            assert [h.result(0).offset for h in handles] == list(range(300))
            assert producer.send(b"last").offset == 300
