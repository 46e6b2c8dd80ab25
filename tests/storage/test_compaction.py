"""Key compaction: semantics, gaps, tombstones, concurrency, crash leftovers."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from jetsdk.codec.record import Record, encode_body
from jetserver.storage import Log, LogConfig
from jetserver.storage import compaction as compaction_module

from .helpers import read_all

SEC = 10**9
CFG = LogConfig(
    segment_max_bytes=600, index_interval_bytes=64, compact=True, delete_retention_s=100
)


def append_keyed(log: Log, items: list[tuple[bytes | None, bytes]], ts: int) -> None:
    log.append([encode_body(v, key=k) for k, v in items], ts, 0)


def append_versions(log: Log, n: int, value: bytes = b"v%d") -> None:
    """``n`` versions of key ``same`` (``value % i``, timestamp ``i``), one append each."""
    for i in range(n):
        append_keyed(log, [(b"same", value % i)], i)


def expected_after_compaction(
    records: list[Record], clean_end: int, now: int, delete_retention_ns: int
) -> list[Record]:
    """The reference: latest per key below clean_end, keyless kept, old tombstones dropped."""
    latest: dict[bytes, int] = {}
    for r in records:
        if r.offset < clean_end and r.key is not None:
            latest[r.key] = r.offset
    out = []
    for r in records:
        if r.offset < clean_end and r.key is not None:
            if latest[r.key] != r.offset:
                continue
            if not r.value and now - r.timestamp > delete_retention_ns:
                continue
        out.append(r)
    return out


def test_keeps_latest_per_key_keyless_and_offsets(tmp_path: Path) -> None:
    now = [1000 * SEC]
    with Log.open(tmp_path, CFG, clock=lambda: now[0]) as log:
        for i in range(40):
            append_keyed(
                log,
                [(b"k%d" % (i % 3), b"v%d" % i), (None, b"free%d" % i)],
                now[0] + i,
            )
        log.set_high_watermark(log.log_end_offset)
        before = read_all(log)
        clean_end = log.segments()[-1].base_offset
        report = log.compact()
        assert report.aborted is None
        assert report.skipped is None
        after = read_all(log)
        assert after == expected_after_compaction(before, clean_end, now[0], 100 * SEC)
        assert report.records_before - report.records_after == len(before) - len(after)
        assert report.bytes_after < report.bytes_before
        assert report.segments_cleaned > 0
        offsets = [r.offset for r in after]
        assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # gaps
        assert [r.value for r in after if r.key == b"k0"][-1] == b"v39"
        # The active segment is untouched.
        assert [r for r in after if r.offset >= clean_end] == [
            r for r in before if r.offset >= clean_end
        ]
        # Compacting again changes nothing but may merge segments.
        # Segments are grouped by their size before cleaning (as Kafka does), so the
        # half-empty segments of the first run are merged by the second.
        again = log.compact()
        assert read_all(log) == after
        assert again.records_after == again.records_before
        assert again.segments_after < report.segments_after
    with Log.open(tmp_path, CFG) as log:
        assert log.recovery.ok
        assert read_all(log) == after


def test_only_below_the_high_watermark(tmp_path: Path) -> None:
    with Log.open(tmp_path, CFG) as log:
        append_versions(log, 30)
        log.set_high_watermark(10)
        before = read_all(log, max_bytes=10_000)
        log.compact()
        log.set_high_watermark(30)
        after = read_all(log)
        # Segments holding offsets >= 10 were not cleaned, so v10..v29 are all there.
        assert [r.value for r in after][-20:] == [b"v%d" % i for i in range(10, 30)]
        assert before == [r for r in after if r.offset < 10] or len(after) < 30


def test_tombstones_expire(tmp_path: Path) -> None:
    now = [1000 * SEC]
    with Log.open(tmp_path, CFG, clock=lambda: now[0]) as log:
        append_keyed(log, [(b"a", b"1"), (b"b", b"1")], now[0])
        append_keyed(log, [(b"a", b"")], now[0])  # tombstone for a
        for i in range(20):
            append_keyed(log, [(None, b"filler-%d" % i)], now[0])
        log.roll()
        log.set_high_watermark(log.log_end_offset)
        log.compact()
        recs = read_all(log)
        assert [(r.key, r.value) for r in recs if r.key] == [(b"b", b"1"), (b"a", b"")]
        now[0] += 101 * SEC
        report = log.compact()
        assert report.tombstones_dropped == 1
        recs = read_all(log)
        assert [(r.key, r.value) for r in recs if r.key] == [(b"b", b"1")]
        assert sum(1 for r in recs if r.key is None) == 20


def test_disabled_or_nothing_to_do(tmp_path: Path) -> None:
    with Log.open(tmp_path / "a", LogConfig()) as log:
        assert log.compact().skipped
    with Log.open(tmp_path / "b", CFG) as log:
        append_keyed(log, [(b"k", b"v")], 1)
        assert log.compact().skipped  # only the active segment


def test_reader_keeps_old_file_after_swap(tmp_path: Path) -> None:
    with Log.open(tmp_path, CFG) as log:
        append_versions(log, 30, b"value-%d")
        log.set_high_watermark(log.log_end_offset)
        sl = log.read(0, 100_000)
        old_bytes = sl.read_bytes()
        assert log.compact().segments_cleaned > 0
        assert sl.read_bytes() == old_bytes  # the unlinked file is still readable
        sl.close()
        assert len(read_all(log)) < 30


def test_appends_and_reads_continue_during_compaction(tmp_path: Path) -> None:
    with Log.open(tmp_path, CFG) as log:
        for i in range(200):
            append_keyed(log, [(b"k%d" % (i % 5), b"v%d" % i)], i)
        log.set_high_watermark(log.log_end_offset)
        reports: list[compaction_module.CompactionReport] = []
        worker = threading.Thread(target=lambda: reports.append(log.compact()))
        worker.start()
        for i in range(200, 300):
            append_keyed(log, [(b"k%d" % (i % 5), b"v%d" % i)], i)
            log.set_high_watermark(log.log_end_offset)
            read_all(log)
        worker.join(30)
        assert not worker.is_alive()
        assert reports[0].aborted is None
        latest = {r.key: r.value for r in read_all(log)}
        assert latest == {b"k%d" % k: b"v%d" % (295 + k) for k in range(5)}
        assert [r.offset for r in read_all(log)][-100:] == list(range(200, 300))


def test_swap_is_abandoned_if_the_log_changed(tmp_path: Path) -> None:
    with Log.open(tmp_path, CFG) as log:
        append_versions(log, 60)
        log.set_high_watermark(log.log_end_offset)
        segments = log._state.segments
        cleanable = [(seg, seg.state) for seg in segments[:-1]]
        key_map = compaction_module.build_key_map(cleanable, now_ns=0, delete_retention_ns=0)
        groups = compaction_module.plan_groups(cleanable, key_map, CFG.segment_max_bytes)
        cleaned = [
            compaction_module.write_group(
                tmp_path,
                [cleanable[i] for i in g],
                key_map,
                interval=64,
                now_ns=0,
                delete_retention_ns=0,
            )
            for g in groups
        ]
        log.truncate_to(5)
        assert log._maintenance.swap_in(cleaned) is not None
        assert not list(tmp_path.glob("*.cleaned"))
        log.set_high_watermark(5)
        assert [r.value for r in read_all(log)] == [b"v%d" % i for i in range(5)]


def test_crash_leftovers_are_repaired(tmp_path: Path) -> None:
    live = tmp_path / "live"
    saved = tmp_path / "saved"
    with Log.open(live, CFG) as log:
        for i in range(60):
            append_keyed(log, [(b"k%d" % (i % 4), b"v%d" % i), (None, b"x%d" % i)], i)
        log.set_high_watermark(log.log_end_offset)
        log.compact()  # cleans segment by segment; the next run merges them
    shutil.copytree(live, saved)
    with Log.open(live, CFG) as log:
        report = log.compact()
        assert report.segments_after < report.segments_before
        after = read_all(log)
        bases_after = {s.base_offset for s in log.segments()}
    # Crash after the merged file was renamed but before the merged-away segments were
    # deleted: put them back (they overlap the merged segment), plus a stray .cleaned file.
    for path in saved.glob("*.log"):
        if int(path.name[:20]) not in bases_after:
            for suffix in (".log", ".index", ".timeindex"):
                shutil.copy(path.with_suffix(suffix), live / path.with_suffix(suffix).name)
    (live / "00000000000000000000.log.cleaned").write_bytes(b"partial")
    with Log.open(live, CFG) as log:
        rep = log.recovery
        assert "00000000000000000000.log.cleaned" in rep.deleted_files
        assert any(name.endswith(".log") for name in rep.deleted_files if "cleaned" not in name)
        assert not rep.corrupt_files
        assert read_all(log) == after


def test_truncation_into_a_compaction_gap_keeps_the_leo(tmp_path: Path) -> None:
    with Log.open(tmp_path, CFG) as log:
        append_versions(log, 40)
        log.set_high_watermark(40)
        log.compact()
        kept = [r.offset for r in read_all(log)]
        gap_end = next(o for o in kept if o > 0)  # offsets [0, gap_end) hold nothing now
        assert gap_end > 2
        log.truncate_to(gap_end - 1)
        assert log.log_end_offset == gap_end - 1
    with Log.open(tmp_path, CFG) as log:
        assert log.log_end_offset == gap_end - 1
        assert log.append([encode_body(b"new", key=b"same")], 99, 0)[0] == gap_end - 1


def test_small_read_chunks_and_large_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction_module, "_READ_CHUNK", 100)
    now = 1000 * SEC
    with Log.open(tmp_path, CFG, clock=lambda: now) as log:
        for i in range(30):
            value = b"v%d-" % i + b"z" * (150 if i % 7 == 0 else 5)  # some records > 100 B
            append_keyed(log, [(b"k%d" % (i % 4), value), (None, b"n%d" % i)], now)
        log.set_high_watermark(log.log_end_offset)
        before = read_all(log)
        clean_end = log.segments()[-1].base_offset
        assert log.compact().aborted is None
        assert read_all(log) == expected_after_compaction(before, clean_end, now, 100 * SEC)


def test_expired_ttl_records_go_like_tombstones(tmp_path: Path) -> None:
    """A record with Jet-TTL reads as a tombstone from its expiry (spec/storage.md §11.2):
    compaction keeps it (its latest record) until ``delete_retention_s`` after the expiry,
    then drops it; a TTL record replaced by a later put, or malformed TTL, is not special."""
    now = [1000 * SEC]
    ttl = (("Jet-TTL", b"5000"),)  # 5 s
    with Log.open(tmp_path, CFG, clock=lambda: now[0]) as log:
        log.append(
            [
                encode_body(b"1", key=b"a", headers=ttl),
                encode_body(b"1", key=b"b", headers=ttl),
                encode_body(b"2", key=b"b"),  # replaces b's expiring record
                encode_body(b"1", key=b"c", headers=(("jet-ttl", b"-5"),)),  # malformed
                encode_body(b"1", key=b"d", headers=(("Jet-TTL", b"200000"),)),  # 200 s
            ],
            now[0],
            0,
        )
        for i in range(20):
            append_keyed(log, [(None, b"filler-%d" % i)], now[0])
        log.roll()
        log.set_high_watermark(log.log_end_offset)

        def keyed() -> list[tuple[bytes | None, bytes]]:
            return [(r.key, r.value) for r in read_all(log) if r.key]

        now[0] += 104 * SEC  # a expired 99 s ago: within delete_retention (100 s)
        log.compact()
        assert keyed() == [(b"a", b"1"), (b"b", b"2"), (b"c", b"1"), (b"d", b"1")]
        now[0] += 2 * SEC  # a expired 101 s ago
        report = log.compact()
        assert report.tombstones_dropped == 1
        assert keyed() == [(b"b", b"2"), (b"c", b"1"), (b"d", b"1")]
        now[0] += 299 * SEC  # d expired 105 s ago
        assert log.compact().tombstones_dropped == 1
        assert keyed() == [(b"b", b"2"), (b"c", b"1")]
        assert sum(1 for r in read_all(log) if r.key is None) == 20
