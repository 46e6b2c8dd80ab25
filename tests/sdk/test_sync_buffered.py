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

import pytest

from jetsdk import sync
from jetsdk.errors import ConcurrentUse
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
