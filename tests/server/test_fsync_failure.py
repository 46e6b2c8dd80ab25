"""A real fsync failure in a real server process costs no acknowledged record.

One `jet server` process runs with the fsync fault shim (tests/support/fsync_fault.py):
one fdatasync of the partition's segment fails with EIO and the bytes written since the
last good sync are dropped, as after a failed writeback on Linux. An idempotent Producer
sends with ack ALL meanwhile. Every send must end acknowledged (the producer retries the
ones whose ALL ack failed; the server must store them again, not answer them as
duplicates of records it lost), and after a restart every acknowledged record must be at
its acked offset exactly once.

On the code before the fix (the flushed offset moved past a failed fsync) all 3,000 sends
were acked and about two thirds of them were gone after the restart.

The same with 80 KiB values (240 sends): their writes are large writes, made from a worker
thread while the failing fsync may run in another (jetserver.storage.fsync_runner).
"""

from __future__ import annotations

import collections
from pathlib import Path

import anyio
import pytest

from jetsdk import Client, Producer
from jetsdk.codec.error_codes import AckPolicy
from support.fault_report import write_report
from support.fsync_fault import FsyncFault
from support.jet_server import records_after_restart, start_faulty_process
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

COUNT = 3000
WAVE = 100
LARGE = 80 * 1024
"""A value whose write is a large write (over fsync_runner.LARGE_WRITE_BYTES)."""
LARGE_COUNT = 240
LARGE_WAVE = 20
BOUND_S = 120.0
SEGMENT = "/0/00000000000000000000.log"  # partition 0's first segment


def value(i: int, size: int = 100) -> bytes:
    return b"record-%06d-" % i + b"x" * (size - 20)


@pytest.mark.parametrize(
    ("fail_at", "size", "on_loop"),
    [(2, 100, True), (15, 100, True), (3, LARGE, True), (15, 100, False)],
)
async def test_failed_fsync_on_a_single_server_loses_no_acked_record(
    nats_server: NatsServer,
    tmp_path: Path,
    fsync_shim: Path,
    fail_at: int,
    size: int,
    on_loop: bool,
) -> None:
    """``on_loop`` false (``fsync_on_loop = false``): every fsync in a worker thread, a
    request's own (``Committer.commit_here``) the system call alone there, begun and
    ended on the loop (``FsyncRunner.sync_in_thread``)."""
    count, wave_size = (COUNT, WAVE) if size < LARGE else (LARGE_COUNT, LARGE_WAVE)
    data = tmp_path / "data"
    marker = tmp_path / "fault-fired"
    fault = FsyncFault(match=SEGMENT, at=fail_at, marker=marker)
    proc = start_faulty_process(nats_server.url, data, fault.env(), fsync_on_loop=on_loop)
    acked: dict[int, bytes] = {}
    failed: list[BaseException] = []
    try:
        with anyio.fail_after(BOUND_S):
            async with Client([proc.address]) as client:
                await client.create_stream("fs", "fs")
                async with Producer(
                    client, "fs", ack=AckPolicy.ALL, idempotent=True, linger=0.001
                ) as producer:
                    # In waves, so that there are many fsyncs for the fault to pick from.
                    for first in range(0, count, wave_size):
                        wave = range(first, min(first + wave_size, count))
                        handles = [await producer.send_soon(value(i, size)) for i in wave]
                        for i, handle in zip(wave, handles, strict=True):
                            try:
                                ack = await handle
                            except Exception as exc:  # reported below, with the count
                                failed.append(exc)
                            else:
                                acked[ack.offset] = value(i, size)
    finally:
        assert proc.stop() == 0
    assert marker.exists(), "the injected fsync failure never fired"
    log_text = proc.log_path.read_text(errors="replace")

    records = await records_after_restart(nats_server.url, data, "fs", BOUND_S)
    stored = {r.offset: r.value for r in records}
    lost = [o for o, v in acked.items() if stored.get(o) != v]
    assert not lost, f"{len(lost)} of {count} acked records lost or changed, first {lost[:5]}"
    counts = collections.Counter(r.value for r in records)
    dups = [v for v, n in counts.items() if n > 1]
    write_report(faults=1, acked=len(acked), lost=len(lost), duplicated=len(dups))
    assert not dups, f"{len(dups)} records stored twice"
    # The producer's retries stored again what the cut removed: every send was acked.
    assert not failed, f"{len(failed)} sends failed, first: {failed[0]!r}"
    assert len(acked) == count
    assert "fsync failed: cut the log back to its last good sync" in log_text
