"""The sync consumer's prefetch buffer keeps the async consumer's meaning.

Iteration takes a batch per trip to the loop thread and hands it out from the calling
thread. What the buffer still holds has not reached the application: a commit, a position
query and closing must not count it (they give it back first), breaking out of a loop and
fetching again must neither skip nor repeat, and two threads reading one consumer get a
clear error.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal

from jetsdk import sync
from jetsdk._sync_support import ITER_BATCH
from jetsdk.errors import ConcurrentUse, OffsetOutOfRange
from support.jet_dev import JetDev

N = 300
"""Messages per test (fewer than one iteration batch, so all arrive in one trip)."""


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _fill(client: sync.Client, name: str, n: int = N) -> None:
    client.create_stream(name, name)
    with sync.Producer(client, name, linger=0.005) as producer:
        for h in [producer.send_soon(b"%d" % i) for i in range(n)]:
            h.result(timeout=30)


def _first(consumer: sync.Consumer, k: int) -> list[int]:
    got = []
    for msg in consumer:
        got.append(msg.offset)
        if len(got) == k:
            break
    return got


def test_breaking_out_and_reading_on_skips_and_repeats_nothing(jet_dev: JetDev) -> None:
    name = _name("buf")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name)
        with sync.Consumer(client, name, start="earliest") as consumer:
            first = _first(consumer, 10)
            assert consumer.position(0) == 10  # the next offset the application gets
            fetched = consumer.fetch(max_records=5, timeout=5)
            rest = _first(consumer, N - 15)
    assert first + [m.offset for m in fetched] + rest == list(range(N))


@pytest.mark.parametrize("how", ["commit", "close"])
def test_group_commits_count_only_what_the_application_got(jet_dev: JetDev, how: str) -> None:
    name, group = _name("bufg"), _name("g")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name)
        # auto_commit: no timer commit within the test, but one at close.
        auto = None if how == "commit" else 600.0
        with sync.Consumer(client, name, group=group, auto_commit=auto) as consumer:
            assert _first(consumer, 40) == list(range(40))
            if how == "commit":
                consumer.commit()
                assert consumer.committed(0) is not None
                assert consumer.committed(0).offset == 40  # type: ignore[union-attr]
        # Closing commits what was processed: the 40 messages, not the buffered batch.
        with sync.Consumer(client, name, group=group, auto_commit=None) as again:
            resumed = [m.offset for m in again.fetch(max_records=10, timeout=10)]
    assert resumed == list(range(40, 50))


def test_a_consumer_read_from_two_threads_fails_clearly(jet_dev: JetDev) -> None:
    name = _name("buft")
    errors: list[BaseException] = []
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Consumer(client, name, start="earliest", max_wait=1.0) as consumer:
            entered = threading.Event()

            def reader() -> None:
                entered.set()
                for _ in range(100):
                    try:
                        consumer.fetch(timeout=3)  # holds the consumer: nothing is stored
                        return
                    except ConcurrentUse:
                        continue  # the main thread had it for a moment: try again
                    except BaseException as exc:
                        errors.append(exc)
                        return

            def grab() -> None:
                for _ in range(300):  # until the reader holds it (at most ~3 s)
                    consumer.fetch(timeout=0.01)

            thread = threading.Thread(target=reader)
            thread.start()
            entered.wait(5)
            with pytest.raises(ConcurrentUse, match="another thread"):
                grab()
            thread.join(10)
    assert errors == []


def test_position_and_lag_follow_reads_from_the_buffer(jet_dev: JetDev) -> None:
    """Each query sees exactly what the application got, also after an earlier query gave
    the buffer back (once rewound, the position stayed at 10 while reading went on)."""
    name = _name("bufp")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name)
        with sync.Consumer(client, name, start="earliest") as consumer:
            got = _first(consumer, 10)
            assert consumer.position(0) == 10
            got += _first(consumer, 5)
            assert consumer.position(0) == 15
            assert consumer.lag(0) == N - 15
            got += [m.offset for m in consumer.fetch(max_records=5, timeout=5)]
            assert consumer.position(0) == 20
            got += _first(consumer, N - 20)
            assert consumer.position(0) == N
    assert got == list(range(N))


def test_a_second_commit_counts_what_was_read_since_the_first(jet_dev: JetDev) -> None:
    name, group = _name("bufc"), _name("g")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name)
        with sync.Consumer(client, name, group=group, auto_commit=None) as consumer:
            assert _first(consumer, 40) == list(range(40))
            consumer.commit()
            assert _first(consumer, 30) == list(range(40, 70))
            consumer.commit()
            assert consumer.committed(0).offset == 70  # type: ignore[union-attr]


class _PortalCalls:
    """Counts blocking round trips to the loop thread (``BlockingPortal.call`` goes through
    ``start_task_soon``, which waits until the loop has spawned the task)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = BlockingPortal.start_task_soon

        def counted(portal: BlockingPortal, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(portal, *args, **kwargs)

        monkeypatch.setattr(BlockingPortal, "start_task_soon", counted)


def test_iteration_hands_batches_over_without_a_round_trip(
    jet_dev: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Iterating takes whole batches from the loop thread, one ahead, with one
    fire-and-forget wake of the loop per batch: no blocking round trip per batch (each was
    a portal call: a task spawned in the loop, two waits for it)."""
    n = 5 * ITER_BATCH
    name = _name("bufr")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name, n)
        with sync.Consumer(client, name, start="earliest") as consumer:
            assert _first(consumer, 1) == [0]  # the first batch is here
            calls = _PortalCalls(monkeypatch)
            got = _first(consumer, n - 1)
            assert calls.count == 0
            assert consumer.position(0) == n
    assert got == list(range(1, n))


def test_manual_acks_count_only_what_the_application_got(jet_dev: JetDev) -> None:
    """With manual acks the buffered messages are not waiting for an ack either: a query
    gives them back (before, the position counted the whole buffer: 300)."""
    name, group = _name("bufm"), _name("g")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name)
        with sync.Consumer(
            client, name, group=group, manual_ack=True, auto_commit=None
        ) as consumer:
            got = []
            for msg in consumer:
                got.append(msg.offset)
                if msg.offset < 8:
                    msg.ack()
                if len(got) == 10:
                    break
            assert consumer.position(0) == 10
            consumer.commit()
            assert consumer.committed(0).offset == 8  # type: ignore[union-attr]
            rest = [m.offset for m in consumer.fetch(max_records=5, timeout=5)]
    assert got == list(range(10))
    assert rest == list(range(10, 15))


def test_reading_everything_then_waiting_counts_all_as_processed(jet_dev: JetDev) -> None:
    """The batch read ahead is settled only once the application started it; an
    application that read everything and waits for more has processed it all, and the
    auto-commit says so."""
    name, group = _name("bufw"), _name("g")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name)
        with sync.Consumer(client, name, group=group, auto_commit=0.1) as consumer:
            assert _first(consumer, 10) == list(range(10))
            assert consumer.position(0) == 10  # the buffer goes back and comes again
            assert _first(consumer, N - 10) == list(range(10, N))
            assert consumer.fetch(timeout=0.5) == []
            committed = None
            for _ in range(100):  # at most ~10 s
                committed = consumer.committed(0)
                if committed is not None and committed.offset == N:
                    break
                consumer.fetch(timeout=0.1)
            assert committed is not None
            assert committed.offset == N


def test_an_error_is_raised_in_the_callers_thread(jet_dev: JetDev) -> None:
    name = _name("bufe")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name, 10)
        with sync.Consumer(client, name, start=50, reset="raise") as consumer:
            with pytest.raises(OffsetOutOfRange):
                next(iter(consumer))
            assert consumer.fetch(timeout=0.2) == []  # raised once; the run stopped


def test_closing_ends_an_iteration_waiting_in_another_thread(jet_dev: JetDev) -> None:
    """A thread iterating a consumer that another thread closes stops (StopIteration, as
    documented; before, the ClientClosed of the loop-side fetch came out of the loop)."""
    name = _name("bufx")
    outcome: list[object] = []
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name, 3)
        consumer = sync.Consumer(client, name, start="earliest", max_wait=0.2).open()
        waiting = threading.Event()

        def reader() -> None:
            try:
                for msg in consumer:
                    outcome.append(msg.offset)
                    if msg.offset == 2:
                        waiting.set()  # the next read waits: nothing more is stored
                outcome.append("stopped")
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=reader)
        thread.start()
        assert waiting.wait(10)
        consumer.close()
        thread.join(10)
        assert not thread.is_alive()
    assert outcome == [0, 1, 2, "stopped"]


def test_reads_on_a_trio_loop_thread(jet_dev: JetDev) -> None:
    name = _name("buftr")
    with sync.Client(jet_dev.servers, backend="trio") as client:
        _fill(client, name)
        with sync.Consumer(client, name, start="earliest") as consumer:
            got = _first(consumer, 10)
            assert consumer.position(0) == 10
            got += [m.offset for m in consumer.fetch(max_records=N, timeout=5)]
            while len(got) < N:
                more = consumer.fetch(max_records=N, timeout=5)
                assert more
                got += [m.offset for m in more]
            assert consumer.fetch(timeout=0) == []
    assert got == list(range(N))


def test_iterating_while_another_thread_waits_in_a_read_fails_clearly(jet_dev: JetDev) -> None:
    name = _name("bufi")
    with sync.Client(jet_dev.servers) as client:
        client.create_stream(name, name)
        with sync.Consumer(client, name, start="earliest", max_wait=0.2) as consumer:
            done = threading.Event()

            def reader() -> None:
                consumer.fetch(timeout=5)  # waits: nothing is stored
                done.set()

            thread = threading.Thread(target=reader)
            thread.start()
            for _ in range(500):  # until the reader waits (bounded: ~5 s)
                if consumer._reads is not None and consumer._reads.busy():
                    break
                threading.Event().wait(0.01)
            with pytest.raises(ConcurrentUse, match="another thread"):
                next(iter(consumer))
            thread.join(10)
            assert done.is_set()


def test_a_seek_drops_the_batch_read_ahead_too(jet_dev: JetDev) -> None:
    """After a seek nothing of the partition's earlier run is handed out: neither the
    buffered messages nor the batch the loop thread read ahead."""
    n = 3 * ITER_BATCH
    name = _name("bufk")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name, n)
        with sync.Consumer(client, name, start="earliest") as consumer:
            assert _first(consumer, 1) == [0]
            reads = consumer._reads
            assert reads is not None
            for _ in range(500):  # until the next batch is ready (bounded: ~5 s)
                if reads._ready:
                    break
                threading.Event().wait(0.01)
            assert reads._ready
            consumer.seek(0, 5)
            assert _first(consumer, 3) == [5, 6, 7]
            assert _first(consumer, n - 8)[-1] == n - 1


def test_fetch_of_more_than_a_batch_gets_them_in_one_call(jet_dev: JetDev) -> None:
    n = 3 * ITER_BATCH
    name = _name("bufb")
    with sync.Client(jet_dev.servers) as client:
        _fill(client, name, n)
        with sync.Consumer(client, name, start="earliest") as consumer:
            for _ in range(50):  # until all are fetched from the server (bounded: ~10 s)
                if consumer.high_watermark(0) == n:
                    break
                threading.Event().wait(0.2)
            got = consumer.fetch(max_records=n - 500, timeout=10)
            assert len(got) == n - 500
