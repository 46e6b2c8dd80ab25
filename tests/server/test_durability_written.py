"""Durability "written" (replication factor 1): records are committed, acknowledged and
visible once written, without waiting for their fsync; the default waits for it.

One `jet server` process runs with the fsync shim's gate (tests/support/fsync_fault.py):
while the gate file exists, every fsync of a segment file waits. With the gate closed, an
ALL ack and a consumer's read of a record in a ``written`` stream come while the fsync of
that record is held open; in a ``flushed`` stream (the default) the ack waits for the gate.

A ``written`` partition's fsyncs run in a worker thread that reports nothing back to the
event loop (jetserver/storage/flush_behind.py) unless one fails; then the flusher takes over and
cuts the log back, and the records acknowledged after that are stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from cluster.harness import wait_until_async
from jetsdk import Client, Consumer, Producer
from jetsdk.codec.error_codes import RETRIABLE, AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, ProduceResult
from jetsdk.errors import JetError, Timeout, error_class
from jetserver.server import Server
from jetserver.storage import fsync_threads
from jetserver.testing import JetServer, nats_flushed
from support.fsync_fault import FsyncFault
from support.jet_server import (
    gated_server_process,
    records_after_restart,
    start_faulty_process,
    start_server_process,
)
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

BOUND_S = 30.0
HELD_S = 1.0
"""How long the flushed stream's ack is checked not to come while its fsync is held."""


async def test_written_commits_before_the_fsync_and_flushed_waits_for_it(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    with gated_server_process(nats_server.url, tmp_path, "--log-level", "INFO") as (gate, proc):
        with anyio.fail_after(BOUND_S):
            async with Client([proc.address]) as client:
                await client.create_stream("wr", "wr", durability="written")
                await client.create_stream("fl", "fl")
                gate.close()
                async with Producer(client, "wr", ack=AckPolicy.ALL, linger=0) as producer:
                    ack = await producer.send(b"seen before its fsync")
                # The fsync covering it is held at the gate, and still a consumer reads it.
                await wait_until_async(gate.blocked.exists, BOUND_S, "an fsync held open")
                async with Consumer(client, "wr", start="earliest") as consumer:
                    got = await consumer.fetch(max_records=10, timeout=5.0)
                assert [(m.offset, m.value) for m in got] == [
                    (ack.offset, b"seen before its fsync")
                ]
                assert gate.gate.exists()

                async with Producer(client, "fl", ack=AckPolicy.ALL, linger=0) as producer:
                    handle = await producer.send_soon(b"acked after its fsync")
                    with anyio.move_on_after(HELD_S) as held:
                        await handle
                    assert held.cancelled_caught, "a flushed stream acked before its fsync"
                    gate.open()
                    await handle


async def test_a_written_partition_fsyncs_in_a_thread_that_does_not_wake_the_loop(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its commit came with the append, so the end of its fsync changes nothing on the
    event loop: no flusher task, and no fsync result handed back through the loop (a
    wake-up per message at light load), yet every record gets fsynced."""
    handed_back = [0]
    settle = fsync_threads._settle

    def counting(*args: object) -> None:
        handed_back[0] += 1
        settle(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(fsync_threads, "_settle", counting)
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="wb", subject="wb.x", durability="written")
        replica = jet.streams.replica("wb", 0)
        before = handed_back[0]
        for i in range(20):
            results = await c.produce("wb", 0, [ProduceMessage(b"w%d" % i)])
            assert [(r.error_code, r.offset) for r in results] == [(ErrorCode.NONE, i)]
        log = replica.log
        deadline = time.monotonic() + BOUND_S
        while log.flushed_offset < 20:  # a worker thread moves it
            assert time.monotonic() < deadline, f"fsynced only up to {log.flushed_offset}"
            await anyio.sleep(0.01)
        assert not replica.committer.flushing  # the flusher task never started
        assert handed_back[0] == before  # no fsync result came back through the loop
        assert [r.value for r in await c.collect("wb", 0, 20)] == [b"w%d" % i for i in range(20)]


async def _send_around_a_cut(
    producer: Producer, proc: JetServer, fired: Callable[[], bool]
) -> tuple[list[bytes], dict[int, bytes]]:
    """Send one message at a time (an fsync each) until the fsync fault fired, wait for
    the flusher's cut back, then send 50 more: every value sent (12 bytes each), and the
    offsets acked after the cut with their values."""
    sent: list[bytes] = []
    i = 0
    while not fired():  # (the fault's marker file)
        sent.append(b"before-%05d" % i)
        await producer.send(sent[-1])
        i += 1
    cut = "fsync failed: cut the log back to its last good sync"
    await wait_until_async(
        lambda: cut in proc.log_path.read_text(errors="replace"),
        BOUND_S,
        "the flusher cut the log back",
    )
    after_cut: dict[int, bytes] = {}
    for j in range(50):
        sent.append(b"after--%05d" % j)
        ack = await producer.send(sent[-1])
        after_cut[ack.offset] = sent[-1]
    return sent, after_cut


async def test_a_failed_background_fsync_hands_the_written_partition_to_the_flusher(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    """An fsync of a ``written`` partition fails (EIO, the bytes since the last good sync
    dropped): the flusher takes over and cuts the log back to that sync; the partition
    keeps serving, and what is acknowledged after the cut is stored, at its offsets, after
    a restart."""
    data = tmp_path / "data"
    marker = tmp_path / "fault-fired"
    fault = FsyncFault(match="/0/00000000000000000000.log", at=3, marker=marker)
    proc = start_server_process(nats_server.url, data, "--log-level", "INFO", env=fault.env())
    after_cut: dict[int, bytes] = {}
    try:
        with anyio.fail_after(BOUND_S):
            async with Client([proc.address]) as client:
                await client.create_stream("wf", "wf", durability="written")
                async with Producer(client, "wf", ack=AckPolicy.ALL, linger=0) as producer:
                    after_cut = (await _send_around_a_cut(producer, proc, marker.exists))[1]
    finally:
        assert proc.stop() == 0
    assert "background fsync failed; the flusher takes over" in proc.log_path.read_text(
        errors="replace"
    )

    records = await records_after_restart(nats_server.url, data, "wf", BOUND_S)
    stored = {r.offset: r.value for r in records}
    assert {o: stored.get(o) for o in after_cut} == after_cut


@pytest.mark.parametrize("on_loop", [True, False], ids=["runner", "threads"])
async def test_a_failed_fsync_of_a_one_step_produce_sends_no_copy_of_what_it_cut(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path, on_loop: bool
) -> None:
    """A ``flushed`` partition's LEADER-acked messages, one at a time, are answered in
    their reader callback and their fsync and NATS copy run from loop callbacks
    (broker/commit_soon.py). One fsync fails (EIO, the bytes since the last good sync
    dropped): the flusher cuts the log back; no NATS copy is sent of a record the cut
    took (a copy goes only once its record is committed), and what is sent after the cut
    is stored at its offsets after a restart. ``threads``: ``fsync_on_loop = false``, so
    every fsync is the thread's system call alone, begun and ended on the loop
    (``FsyncRunner.sync_in_thread_then``, ``Log.begin_sync`` / ``end_sync``)."""
    import nats

    data = tmp_path / "data"
    marker = tmp_path / "fault-fired"
    fault = FsyncFault(match="/0/00000000000000000000.log", at=3, marker=marker)
    proc = start_faulty_process(nats_server.url, data, fault.env(), fsync_on_loop=on_loop)
    nc = await nats.connect(nats_server.url, allow_reconnect=False)
    copies: list[bytes] = []

    async def on_copy(msg: object) -> None:
        copies.append(msg.data[-12:])  # type: ignore[attr-defined]  # (the value)

    after_cut: dict[int, bytes] = {}
    sent: list[bytes] = []
    try:
        await nc.subscribe("ff", cb=on_copy)
        await nats_flushed(nc)
        with anyio.fail_after(BOUND_S):
            async with Client([proc.address]) as client:
                await client.create_stream("ff", "ff")  # (durability flushed: the default)
                async with Producer(client, "ff", ack=AckPolicy.LEADER, linger=0) as producer:
                    sent, after_cut = await _send_around_a_cut(producer, proc, marker.exists)
                await wait_until_async(
                    lambda: sum(c.startswith(b"after") for c in copies) >= 50,
                    BOUND_S,
                    "the copies of the messages after the cut",
                )
    finally:
        await nc.close()
        assert proc.stop() == 0
    records = await records_after_restart(nats_server.url, data, "ff", BOUND_S)
    stored = {r.offset: r.value for r in records}
    assert {o: stored.get(o) for o in after_cut} == after_cut
    lost = set(sent) - set(stored.values())
    assert lost, "the failed fsync cut nothing (the fault fired elsewhere)"
    assert set(copies) <= set(stored.values())  # no copy of a record the cut took
    assert [c for c in copies if c.startswith(b"after")] == list(after_cut.values())


@pytest.mark.parametrize("on_loop", [True, False], ids=["runner", "threads"])
async def test_a_failed_fsync_fails_the_all_acks_answered_by_their_commit(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path, on_loop: bool
) -> None:
    """A ``flushed`` partition's ALL-acked messages, one at a time, are taken in their
    reader callback and answered by their commit (broker/produce_one.py,
    ``AnswerAtCommit``: the fsync's end heard in a loop callback). One fsync fails (EIO,
    the bytes since the last good sync dropped): the message it covered is answered with
    the cut's error (the producer sends it again), never acked; every message acked,
    before the cut or after it, is stored at its acked offset after a restart.
    ``threads``: every fsync in a worker thread (``fsync_on_loop = false``)."""
    data = tmp_path / "data"
    marker = tmp_path / "fault-fired"
    fault = FsyncFault(match="/0/00000000000000000000.log", at=3, marker=marker)
    proc = start_faulty_process(nats_server.url, data, fault.env(), fsync_on_loop=on_loop)
    acked: list[tuple[int, bytes]] = []
    failed: list[tuple[bytes, ErrorCode | None]] = []
    cut = "fsync failed: cut the log back to its last good sync"
    try:
        with anyio.fail_after(BOUND_S):
            async with Client([proc.address]) as client:
                await client.create_stream("fa", "fa")  # (durability flushed: the default)
                async with Producer(client, "fa", ack=AckPolicy.ALL, linger=0) as producer:
                    for i in range(400):
                        value = b"value-%05d" % i
                        try:
                            ack = await producer.send(value)
                        except JetError as exc:
                            failed.append((value, exc.code))
                        else:
                            acked.append((ack.offset, value))
                        if len(acked) >= 50 and cut in proc.log_path.read_text(errors="replace"):
                            break
                    after = i + 1
                    for j in range(after, after + 30):  # after the cut: stored again
                        value = b"value-%05d" % j
                        ack = await producer.send(value)
                        acked.append((ack.offset, value))
    finally:
        assert proc.stop() == 0
    assert marker.exists(), "the injected fsync failure never fired"
    records = await records_after_restart(nats_server.url, data, "fa", BOUND_S)
    stored = {r.offset: r.value for r in records}
    lost = [(o, v) for o, v in acked if stored.get(o) != v]
    assert not lost, f"{len(lost)} acked records lost or changed: {lost[:5]}"
    assert cut in proc.log_path.read_text(errors="replace")
    # The message the cut took was failed (STORAGE_ERROR, retriable: the producer sent
    # it again) or, if the producer gave up, is not stored.
    assert {code for _v, code in failed} <= {ErrorCode.STORAGE_ERROR}
    assert not {v for v, _c in failed} & set(stored.values())


HUNG_TIMEOUT_MS = 1000
"""The timeout of the requests answered while an fsync hangs."""


HUNG_SETTINGS = {
    "threads": {"fsync_on_loop": False},
    "loop_wait": {"fsync_loop_wait_ms": 20.0},
}
"""The two ways an fsync that hangs does not stop the server: every fsync in a worker
thread, or those the runner would run on the loop in a thread the loop waits for up to
20 ms (storage/waited_sync.py). With neither (the loop fsync) the first hung fsync on the
loop stops it: nothing answered (the 'free' produces time out)."""


@pytest.mark.parametrize("mode", sorted(HUNG_SETTINGS))
async def test_an_all_answer_on_a_hung_fsync_times_out_and_the_rest_is_served(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path, mode: str
) -> None:
    """An ALL-acked Produce whose fsync never returns (a hung disk) is answered TIMEOUT at its
    timeout, by the server, while the server serves its other partitions.

    A one-message ALL-acked request on a server alone is answered by its commit, with no
    task (broker/produce_one.py, ``AnswerAtCommit``). Its commit waits for the fsync; a disk
    that stops answering holds that fsync in its worker thread for as long as it likes. The
    request's own timeout (``timeout_ms``, capped by ``[limits] max_produce_timeout_s``)
    bounds the answer, as it bounds the general path's (a request of two messages, in its
    task, checked here too): TIMEOUT then (retriable: the record may or may not be stored),
    whatever the fsync does later. Before, the one-step request had no answer until the fsync
    returned: none while the gate was closed.

    One `jet server` process runs with the fsync shim's gate (tests/support/fsync_fault.py)
    over one stream's segment files only, and ``fsync_on_loop = false`` (``threads``) or
    ``fsync_loop_wait_ms = 20`` (``loop_wait``), so that stream's fsyncs wait in a worker
    thread while the test holds the gate closed, the loop for 20 ms at most (an fsync on the
    event loop that never returns would stop the whole loop: :data:`HUNG_SETTINGS`).
    """
    settings = {"storage": HUNG_SETTINGS[mode]}
    with gated_server_process(
        nats_server.url, tmp_path, "--log-level", "INFO", settings=settings, match="/streams/hung-"
    ) as (gate, proc):
        with anyio.fail_after(BOUND_S):
            async with (
                await RawClient.connect(proc.address) as c,
                await RawClient.connect(proc.address) as held_client,
            ):
                for name in ("hung", "free"):
                    await c.create_stream(name=name, subject=name, durability="flushed")
                for value in (b"acked-0", b"acked-1"):
                    (acked,) = await c.produce(
                        "hung", 0, [ProduceMessage(value)], ack_policy=AckPolicy.ALL
                    )
                    assert acked.error_code == ErrorCode.NONE
                gate.close()
                held: list[ProduceResult] = []
                took = 0.0

                async def produce_held() -> None:
                    nonlocal took
                    start = time.monotonic()
                    held.extend(
                        await held_client.produce(
                            "hung",
                            0,
                            [ProduceMessage(b"held")],
                            ack_policy=AckPolicy.ALL,
                            timeout_ms=HUNG_TIMEOUT_MS,
                        )
                    )
                    took = time.monotonic() - start

                async with anyio.create_task_group() as tg:
                    tg.start_soon(produce_held)
                    await wait_until_async(gate.blocked.exists, BOUND_S, "the fsync held")
                    # The other partition is served meanwhile, ack ALL included.
                    for i in range(3):
                        (free,) = await c.produce(
                            "free", 0, [ProduceMessage(b"f%d" % i)], ack_policy=AckPolicy.ALL
                        )
                        assert (free.error_code, free.offset) == (ErrorCode.NONE, i)
                assert [r.error_code for r in held] == [ErrorCode.TIMEOUT]
                assert HUNG_TIMEOUT_MS / 1000 - 0.1 <= took < HUNG_TIMEOUT_MS / 1000 + 5.0
                # Two messages: the general path, in the request's task.
                start = time.monotonic()
                two = await held_client.produce(
                    "hung",
                    0,
                    [ProduceMessage(b"two-0"), ProduceMessage(b"two-1")],
                    ack_policy=AckPolicy.ALL,
                    timeout_ms=HUNG_TIMEOUT_MS,
                )
                took = time.monotonic() - start
                assert [r.error_code for r in two] == [ErrorCode.TIMEOUT] * 2
                assert HUNG_TIMEOUT_MS / 1000 - 0.1 <= took < HUNG_TIMEOUT_MS / 1000 + 5.0
                assert gate.blocked.exists()  # still held: the answer did not wait
                # Through the SDK's client: its typed, retriable error, the server's
                # answer (no retry; the client's own wait is longer).
                async with Client(proc.address) as client:
                    request = ProduceRequest(
                        "hung", 0, AckPolicy.ALL, HUNG_TIMEOUT_MS, (ProduceMessage(b"sdk"),)
                    )
                    start = time.monotonic()
                    (result,) = await client.produce(request, retry_if=lambda _e: False)
                    took = time.monotonic() - start
                error = error_class(result.error_code)
                assert error is Timeout
                assert issubclass(error, TimeoutError)
                assert result.error_code in RETRIABLE
                assert HUNG_TIMEOUT_MS / 1000 - 0.1 <= took < HUNG_TIMEOUT_MS / 1000 + 5.0
                gate.open()

                async def committed() -> bool:
                    answer = await c.list_offsets("hung", 0, "latest")
                    return bool(answer["offset"] >= 3)

                await wait_until_async(committed, BOUND_S, "the held record committed")
    records = await records_after_restart(nats_server.url, tmp_path / "data", "hung", BOUND_S)
    values = [r.value for r in records]
    assert values[:2] == [b"acked-0", b"acked-1"]  # nothing acknowledged lost
    assert set(values[2:]) <= {b"held", b"two-0", b"two-1", b"sdk"}  # timed out: may be stored
