"""Helpers shared by the storage tests."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from jetsdk.codec.record import Record, encode_body, iter_records
from jetserver.storage import Log, LogConfig, files
from jetserver.storage import log as log_module

SMALL = LogConfig(segment_max_bytes=2000, index_interval_bytes=100)
"""Tiny segments and a dense index, so a few records exercise rolling and lookups."""


def bodies(n: int, *, start: int = 0, key_mod: int | None = None, size: int = 10) -> list[bytes]:
    """``n`` record bodies with values ``v<i>`` padded to ``size``; keyed ``k<i % key_mod>``."""
    out = []
    for i in range(start, start + n):
        key = None if key_mod is None else b"k%d" % (i % key_mod)
        out.append(encode_body((b"v%d" % i).ljust(size, b"."), key=key))
    return out


def fill(
    log: Log, batches: int, per_batch: int = 10, *, ts0: int = 1_000, epoch_every: int = 0
) -> None:
    """Append ``batches`` batches of ``per_batch`` 40-byte records (values numbered from 0),
    batch ``i`` at timestamp ``ts0 + i`` in leader epoch ``i // epoch_every`` (0 without
    ``epoch_every``); then commit them all (HW = LEO)."""
    for i in range(batches):
        epoch = i // epoch_every if epoch_every else 0
        log.append(bodies(per_batch, start=per_batch * i, size=40), ts0 + i, epoch)
    log.set_high_watermark(log.log_end_offset)


def read_all(log: Log, start: int | None = None, max_bytes: int = 1000) -> list[Record]:
    """Every record from ``start`` (default log start) to the high watermark, via read()."""
    offset = log.log_start_offset if start is None else start
    records: list[Record] = []
    for _ in range(100_000):
        with log.read(offset, max_bytes) as sl:
            if sl.empty:
                assert sl.next_offset >= offset
                if sl.next_offset == offset:
                    return records
                offset = sl.next_offset
                continue
            got = list(iter_records(sl.read_bytes()))
            assert got, "a non-empty slice holds at least one whole record"
            assert got[0].offset == sl.first_offset
            assert got[-1].offset < sl.next_offset
            assert sum(1 for _ in got) >= 1
            records.extend(got)
            offset = sl.next_offset
    raise AssertionError("read_all did not finish")


def open_logs(directory: Path) -> int:
    """How many ``.log`` files under ``directory`` this process holds open now (from
    /proc/self/fd), deleted ones still open included."""
    prefix = str(directory.resolve())
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        # A deleted file's link reads "<path> (deleted)".
        if target.startswith(prefix) and ".log" in target:
            count += 1
    return count


def gate_fdatasync(
    monkeypatch: pytest.MonkeyPatch, wait_s: float, arrived: Callable[[], object] | None = None
) -> tuple[threading.Event, threading.Event]:
    """Hold every fdatasync a log calls open until the first event returned is set (at
    most ``wait_s``); the second is set once one is held. ``arrived``, if given, is called
    by each fdatasync before it waits (e.g. a barrier's ``wait``)."""
    release, held = threading.Event(), threading.Event()
    real = files.fdatasync

    def gated(fd: int) -> None:
        held.set()
        if arrived is not None:
            arrived()
        assert release.wait(wait_s)
        real(fd)

    monkeypatch.setattr(log_module, "fdatasync", gated)
    return release, held
