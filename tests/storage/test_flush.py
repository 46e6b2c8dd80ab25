"""Group commit: one fsync covers every record appended before it started."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jetserver.storage import Log, LogConfig, files
from jetserver.storage import log as log_module

from .helpers import bodies

WAIT = 10.0  # seconds; a bound on every wait in this file, never a synchronisation sleep


class GatedFsync:
    """Wraps the real fdatasync: the first call signals ``entered`` and waits for ``release``."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self._first = True
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
            first, self._first = self._first, False
        if first:
            self.entered.set()
            assert self.release.wait(WAIT)
        self.real(fd)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[GatedFsync]:
    gated = GatedFsync(files.fdatasync)
    monkeypatch.setattr(log_module, "fdatasync", gated)
    yield gated
    gated.release.set()


def run_threads(targets: list[Callable[[], object]]) -> list[threading.Thread]:
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    return threads


def test_concurrent_callers_share_one_fsync(tmp_path: Path, gate: GatedFsync) -> None:
    with Log.open(tmp_path) as log:
        log.append(bodies(100), 1, 0)
        assert log.flushed_offset == 0
        results: list[int] = []
        first = run_threads([lambda: results.append(log.flush())])
        assert gate.entered.wait(WAIT)  # the first fsync is in flight and covers offset 100

        def flush_upto(upto: int | None) -> Callable[[], None]:
            return lambda: results.append(log.flush(upto))

        others = run_threads([flush_upto(u) for u in (10, 50, None, 99)])
        gate.release.set()
        for t in first + others:
            t.join(WAIT)
            assert not t.is_alive()
        assert results == [100] * 5
        assert log.fsync_count == 1
        assert gate.calls == 1
        assert log.flush() == 100  # already covered: no new fsync
        assert log.fsync_count == 1


def test_caller_not_covered_by_the_inflight_fsync_gets_the_next_one(
    tmp_path: Path, gate: GatedFsync
) -> None:
    with Log.open(tmp_path) as log:
        log.append(bodies(100), 1, 0)
        results: list[int] = []
        first = run_threads([lambda: results.append(log.flush())])
        assert gate.entered.wait(WAIT)
        log.append(bodies(50), 1, 0)  # appended after the in-flight fsync started
        later = run_threads([lambda: results.append(log.flush()) for _ in range(4)])
        gate.release.set()
        for t in first + later:
            t.join(WAIT)
            assert not t.is_alive()
        # Each call returns flushed_offset once it covers its target (the first may already
        # see the second fsync's result).
        assert len(results) == 5
        assert min(results) >= 100
        assert sorted(results)[1:] == [150] * 4
        assert log.fsync_count == 2  # the four late callers shared the second fsync
        assert log.flushed_offset == 150


def test_flush_with_a_concurrent_writer(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(segment_max_bytes=50_000)) as log:
        done = threading.Event()
        errors: list[BaseException] = []
        calls = [0]

        def flusher() -> None:
            try:
                while not done.is_set():
                    target = log.log_end_offset
                    assert log.flush(target) >= target
                    calls[0] += 1
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = run_threads([flusher, flusher, flusher])
        for i in range(200):
            log.append(bodies(20, start=20 * i), i, 0)
        done.set()
        for t in threads:
            t.join(WAIT)
            assert not t.is_alive()
        assert not errors
        assert log.flush() == 4000
        assert log.segment_count > 1
        assert log.fsync_count <= calls[0] + 1


def test_roll_makes_older_segments_durable(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        log.append(bodies(10), 1, 0)
        log.roll()
        assert log.flushed_offset == 10
        log.truncate_to(5)
        assert log.flushed_offset == 5
