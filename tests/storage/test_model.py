"""Model-based test: the Log against a dict reference under random operations."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import event, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from jetsdk.codec.record import Record, encode_body, iter_records
from jetserver.storage import Log, LogConfig

from .helpers import read_all

SEC = 10**9
CONFIG = LogConfig(
    segment_max_bytes=400,
    index_interval_bytes=50,
    compact=True,
    retention_max_messages=30,
    delete_retention_s=10,
)
KEYS = [None, b"a", b"b", b"c", b"d"]

message = st.tuples(st.sampled_from(KEYS), st.sampled_from([b"", b"x", b"hello", b"y" * 40]))


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="jet-model-"))
        self.now = 1_000 * SEC
        self.log = Log.open(self.dir, CONFIG, clock=lambda: self.now)
        self.records: dict[int, Record] = {}
        self.leo = 0
        self.hw = 0
        self.log_start = 0
        self.checkpointed_hw = 0
        self.last_ts = -(2**63)
        self.epoch = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- operations ----------------------------------------------------------------------

    @initialize(batches=st.lists(st.lists(message, min_size=1, max_size=8), max_size=8))
    def fill(self, batches: list[list[tuple[bytes | None, bytes]]]) -> None:
        for batch in batches:
            self.append(batch, 0, commit=True)

    @rule(
        batch=st.lists(message, min_size=1, max_size=8),
        dt=st.integers(-3 * SEC, 3 * SEC),
        commit=st.booleans(),
    )
    def append(self, batch: list[tuple[bytes | None, bytes]], dt: int, commit: bool) -> None:
        ts = self.now + dt
        first, used = self.log.append([encode_body(v, key=k) for k, v in batch], ts, self.epoch)
        assert first == self.leo
        assert used == max(ts, self.last_ts)
        for i, (key, value) in enumerate(batch):
            self.records[first + i] = Record(
                offset=first + i, timestamp=used, leader_epoch=self.epoch, value=value, key=key
            )
        self.leo += len(batch)
        self.last_ts = used
        if commit:
            self.hw = self.log.set_high_watermark(self.leo)

    @rule(fraction=st.floats(0, 1))
    def set_high_watermark(self, fraction: float) -> None:
        hw = self.log_start + round((self.leo - self.log_start) * fraction)
        assert self.log.set_high_watermark(hw) == hw
        self.hw = hw

    @rule()
    def commit_everything(self) -> None:
        self.hw = self.log.set_high_watermark(self.leo)
        self.log.checkpoint_high_watermark()
        self.checkpointed_hw = self.hw

    @rule(fraction=st.floats(0, 1), max_bytes=st.integers(0, 600))
    def read(self, fraction: float, max_bytes: int) -> None:
        offset = self.log_start + round((self.leo - self.log_start) * fraction)
        expected = [self.records[o] for o in sorted(self.records) if offset <= o < self.hw]
        with self.log.read(offset, max_bytes) as sl:
            got = list(iter_records(sl.read_bytes()))
            event(f"read returned records: {not sl.empty}")
            if sl.empty:
                assert not expected
                return
            assert got == expected[: len(got)]
            assert sl.first_offset == got[0].offset
            assert sl.next_offset > got[-1].offset
            assert not [r for r in expected[len(got) :] if r.offset < sl.next_offset]
            if len(got) > 1:
                assert sl.length <= max_bytes

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(fraction=st.floats(0, 1))
    def truncate(self, fraction: float) -> None:
        offset = self.log_start + round((self.leo - self.log_start) * fraction)
        event(f"truncation dropped records: {offset < self.leo}")
        self.log.truncate_to(offset)
        self.records = {o: r for o, r in self.records.items() if o < offset}
        self.leo = offset
        self.hw = min(self.hw, offset)
        self.last_ts = max((r.timestamp for r in self.records.values()), default=-(2**63))
        self.epoch += 1  # a follower would next append under a new leader's epoch

    @rule()
    def retention(self) -> None:
        before = self.log_start
        event(f"retention deleted segments: {self.log.enforce_retention() > 0}")
        start = self.log.log_start_offset
        assert before <= start
        # Spec §10: no deleted segment held an offset at or above the HW. The new start (the
        # next segment's base) may still pass the HW when compaction left a gap there.
        assert start <= self.hw or not any(o >= self.hw for o in self.records if o < start)
        assert start in {s.base_offset for s in self.log.segments()} or start == before
        self.records = {o: r for o, r in self.records.items() if o >= start}
        self.log_start = start
        self.hw = max(self.hw, start)

    @rule()
    def compact(self) -> None:
        segments = self.log.segments()
        clean_end = self.log_start
        for seg in segments[:-1]:
            if seg.next_offset > self.hw:
                break
            clean_end = max(clean_end, seg.next_offset)
        latest: dict[bytes, int] = {}
        for o, r in sorted(self.records.items()):
            if o < clean_end and r.key is not None:
                latest[r.key] = o
        keep = {}
        for o, r in self.records.items():
            if o < clean_end and r.key is not None:
                if latest[r.key] != o:
                    continue
                if not r.value and self.now - r.timestamp > CONFIG.delete_retention_s * SEC:
                    continue
            keep[o] = r
        report = self.log.compact()
        assert report.aborted is None
        event(f"compaction dropped records: {len(keep) < len(self.records)}")
        self.records = keep

    @rule(seconds=st.integers(1, 30))
    def advance_clock(self, seconds: int) -> None:
        self.now += seconds * SEC

    @rule()
    def flush(self) -> None:
        assert self.log.flush() == self.leo

    @rule(dt=st.integers(-5 * SEC, 40 * SEC))
    def offset_for_timestamp(self, dt: int) -> None:
        ts = 1_000 * SEC + dt
        expected = next(
            (o for o in sorted(self.records) if o < self.hw and self.records[o].timestamp >= ts),
            None,
        )
        assert self.log.offset_for_timestamp(ts) == expected

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.checkpointed_hw = self.hw
        self.log = Log.open(self.dir, CONFIG, clock=lambda: self.now)
        assert self.log.recovery.clean_shutdown
        assert self.log.recovery.ok

    @precondition(lambda self: self.leo > 0)
    @rule()
    def crash_and_reopen(self) -> None:
        self.log._crash()
        self.log = Log.open(self.dir, CONFIG, clock=lambda: self.now)
        assert self.log.recovery.ok  # nothing torn: the page cache kept every write
        self.hw = max(min(self.checkpointed_hw, self.leo), self.log_start)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def offsets_agree(self) -> None:
        assert self.log.log_end_offset == self.leo
        assert self.log.high_watermark == self.hw
        assert self.log.log_start_offset == self.log_start

    @invariant()
    def contents_agree(self) -> None:
        expected = [self.records[o] for o in sorted(self.records) if o < self.hw]
        assert read_all(self.log, max_bytes=250) == expected


TestLogModel = LogMachine.TestCase
TestLogModel.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
