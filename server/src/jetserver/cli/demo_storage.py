"""A short demonstration of the storage engine: ``python -m jetserver.cli.demo_storage [DIR]``.

Appends keyed records across several segments, compacts them (record count before and
after, and the offset gaps compaction leaves), simulates a torn write by cutting bytes off
the active segment, reopens the log and prints the recovery report, then reads back.
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

from jetsdk.codec.record import Record, encode_body, iter_records
from jetserver.storage import Log, LogConfig

KEYS = 8
UPDATES = 40


def _read_all(log: Log) -> list[Record]:
    records: list[Record] = []
    offset = log.log_start_offset
    while True:
        with log.read(offset, 64 * 1024) as sl:
            if sl.empty:
                if sl.next_offset == offset:
                    return records
            else:
                records.extend(iter_records(sl.read_bytes()))
            offset = sl.next_offset


def run(directory: Path) -> None:
    """Run the demonstration in ``directory`` (a new partition log is created under it)."""
    path = Path(directory) / "orders-0"
    config = LogConfig(segment_max_bytes=4096, index_interval_bytes=512, compact=True)
    print(f"partition directory: {path}")

    log = Log.open(path, config)
    now = time.time_ns()
    for update in range(UPDATES):
        batch = [
            encode_body(b'{"version": %d}' % update, key=b"order-%d" % key, subject="orders")
            for key in range(KEYS)
        ]
        batch.append(encode_body(b"audit entry %d" % update, subject="orders"))  # keyless
        log.append(batch, now + update, leader_epoch=0)
    log.set_high_watermark(log.log_end_offset)
    log.roll()  # everything below the high watermark is now outside the active segment
    before = _read_all(log)
    print(
        f"appended {len(before)} records ({KEYS} keys x {UPDATES} updates + {UPDATES} keyless)"
        f" in {log.segment_count} segments, {log.size_bytes} bytes"
    )

    report = log.compact()
    after = _read_all(log)
    print(
        f"compaction: {report.records_before} -> {report.records_after} records, "
        f"{report.bytes_before} -> {report.bytes_after} bytes, "
        f"{report.segments_before} -> {report.segments_after} segments"
    )
    offsets = [r.offset for r in after]
    gaps = [(a, b) for a, b in itertools.pairwise(offsets) if b != a + 1]
    print(f"offsets kept (first 12): {offsets[:12]} ...; {len(gaps)} gaps, e.g. {gaps[:3]}")
    again = log.compact()
    print(
        f"second compaction merges the shrunken segments: "
        f"{again.segments_before} -> {again.segments_after} segments, "
        f"{again.records_after} records (unchanged)"
    )
    latest = {r.key: r.value for r in after if r.key is not None}
    print(f"latest value per key survives: order-3 = {latest[b'order-3'].decode()}")

    tail = [encode_body(b"late %d" % i, key=b"late", subject="orders") for i in range(5)]
    first, _ts = log.append(tail, now + UPDATES, leader_epoch=0)
    log.flush()
    log.close()
    active = sorted(path.glob("*.log"))[-1]
    size = active.stat().st_size
    os.truncate(active, size - 10)
    print(
        f"appended offsets {first}..{first + 4}, closed, then cut 10 bytes off {active.name} "
        f"({size} -> {size - 10} bytes) to simulate a torn write"
    )

    log = Log.open(path, config)
    print(log.recovery.summary())
    log.set_high_watermark(log.log_end_offset)
    back = _read_all(log)
    print(
        f"read back {len(back)} records; log end offset {log.log_end_offset} "
        f"(the torn record {first + 4} is gone, {first}..{first + 3} are intact: "
        f"{[r.value.decode() for r in back[-4:]]})"
    )
    log.close()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="jet-demo-storage-") as tmp:
            run(Path(tmp))
