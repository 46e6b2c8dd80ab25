"""The sync producer's send queue: thread-safe, ordered, checked on the caller's thread,
drained by flush and by closing, its handles usable from any thread."""

from __future__ import annotations

import threading
import uuid

import pytest

from jetsdk import sync
from jetsdk.errors import MessageTooLarge, PartitionNotFound
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
