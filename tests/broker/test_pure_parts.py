"""Direct tests of the broker's pure parts: header controls of plain NATS messages, the
record-body caches of the sequencer, the offline-partition registry, opening many partition
logs in one call."""

from __future__ import annotations

import errno
import struct
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.limits import MAX_SUBJECT_BYTES
from jetsdk.codec.record import encode_body
from jetserver.broker.header_controls import read_controls
from jetserver.broker.offline import OfflinePartitions
from jetserver.broker.record_fields import MAX_CACHED_SUBJECTS, RecordFields
from jetserver.broker.stream_files import OpenJob, open_partition_logs, sync_directories
from jetserver.errors import ApiError
from jetserver.storage import LogConfig, StorageError, durability_trace

# -- header controls (spec/envelope.md, "Header controls") --------------------------------


def test_no_controls_is_the_common_case() -> None:
    assert read_controls((("X-Trace", b"1"), ("Content-Type", b"json"))) is None
    assert read_controls(()) is None


def test_controls_are_read_case_insensitively_and_removed_from_the_stored_headers() -> None:
    controls = read_controls(
        (
            ("x-a", b"1"),
            ("JET-ACK", b" All "),
            ("Jet-Key", b"user-7"),
            ("jet-expected-offset", b"42"),
            ("Nats-Msg-Id", b"order-1"),
            ("x-a", b"2"),
        )
    )
    assert controls is not None
    assert controls.policy is AckPolicy.ALL
    assert controls.key == b"user-7"
    assert controls.expected_offset == 42
    assert controls.msg_id == b"order-1"
    assert controls.error == ""
    # Nats-Msg-Id is stored (a new leader rebuilds its ids from the log); the Jet- ones not.
    assert controls.headers == (("x-a", b"1"), ("Nats-Msg-Id", b"order-1"), ("x-a", b"2"))


@pytest.mark.parametrize(
    ("header", "value", "error"),
    [
        ("Jet-Ack", b"maybe", "Jet-Ack must be none, leader or all"),
        ("Jet-Expected-Offset", b"-1", "must be a non-negative integer"),
        ("Jet-Expected-Offset", b"12a", "must be a non-negative integer"),
        ("Jet-Expected-Offset", b"9" * 20, "must be a non-negative integer"),
    ],
)
def test_bad_control_values_are_reported(header: str, value: bytes, error: str) -> None:
    controls = read_controls(((header, value),))
    assert controls is not None
    assert error in controls.error
    assert controls.policy is None
    assert controls.expected_offset is None


@given(st.sampled_from(["none", "leader", "all"]), st.sampled_from([str.lower, str.upper]))
def test_every_policy_name_is_understood(name: str, case: object) -> None:
    controls = read_controls((("Jet-Ack", case(name).encode()),))  # type: ignore[operator]
    assert controls is not None
    assert controls.policy is AckPolicy[name.upper()]


# -- record-body caches -------------------------------------------------------------------


@given(st.text(max_size=40), st.binary(max_size=64))
def test_a_plain_prefix_plus_the_value_is_the_codec_s_record_body(
    subject: str, value: bytes
) -> None:
    fields = RecordFields()
    prefix = fields.new_plain_prefix(subject)
    body = prefix + struct.pack(">I", len(value)) + value
    assert body == encode_body(value, subject=subject)
    assert fields.plain_prefix[subject] is prefix


def test_a_subject_over_the_limit_gets_no_prefix_and_no_subject_fields() -> None:
    fields = RecordFields()
    long = "s" * (MAX_SUBJECT_BYTES + 1)
    assert fields.new_plain_prefix(long) == b""
    assert fields.subjects(long, "") is None


def test_subject_fields_are_cached_only_without_a_reply() -> None:
    fields = RecordFields()
    plain = fields.subjects("orders", "")
    assert plain is not None
    assert fields.subjects("orders", "") is plain  # the cached object
    with_reply = fields.subjects("orders", "_INBOX.1")
    assert with_reply is not None
    assert with_reply != plain
    assert fields.subjects("orders", "_INBOX.1") is not with_reply  # built each time
    # The subject and reply fields sit between the key and the headers of a record body.
    body = encode_body(b"v", subject="orders", reply="_INBOX.1")
    assert with_reply in body


def test_the_caches_are_bounded() -> None:
    fields = RecordFields()
    for i in range(MAX_CACHED_SUBJECTS + 5):
        fields.new_plain_prefix(f"s.{i}")
        fields.subjects(f"s.{i}", "")
    assert len(fields.plain_prefix) <= MAX_CACHED_SUBJECTS
    assert len(fields._subject_fields) <= MAX_CACHED_SUBJECTS


# -- offline partitions -------------------------------------------------------------------


def test_an_offline_partition_fails_fast_until_it_opens() -> None:
    offline = OfflinePartitions()
    offline.check("orders", 0)  # not offline: nothing happens
    offline.failed("orders", 0, OSError(errno.EIO, "Input/output error"))
    assert list(offline) == [("orders", 0)]
    assert offline.get(("orders", 0)) == "[Errno 5] Input/output error"
    with pytest.raises(ApiError) as info:
        offline.check("orders", 0)
    assert info.value.code == ErrorCode.PARTITION_OFFLINE
    assert info.value.details == {
        "stream": "orders",
        "partition": 0,
        "offline": "[Errno 5] Input/output error",
    }
    offline.check("orders", 1)  # the other partitions serve
    offline.opened("orders", 0)
    offline.check("orders", 0)
    assert offline.get(("orders", 0)) is None


def test_running_out_of_files_is_explained_with_the_remedy() -> None:
    offline = OfflinePartitions()
    offline.failed("orders", 2, OSError(errno.EMFILE, "Too many open files"))
    reason = offline.get(("orders", 2))
    assert reason is not None
    assert reason.startswith("too many open files (limit ")
    assert "ulimit -n" in reason


# -- opening many partition logs in one worker call ----------------------------------------


def test_opening_many_logs_keeps_going_past_one_that_fails(tmp_path: Path) -> None:
    (tmp_path / "blocked").write_bytes(b"a file where a partition directory should be")
    jobs = [
        OpenJob(tmp_path / "a", LogConfig(), "a", 0, True),
        OpenJob(tmp_path / "blocked" / "0", LogConfig(), "blocked", 0, True),
        OpenJob(tmp_path / "b", LogConfig(), "b", 0, False),
    ]
    results = open_partition_logs(jobs)
    assert isinstance(results[1], StorageError)  # Log.open makes the directory
    assert isinstance(results[1].__cause__, NotADirectoryError)
    opened = [r for r in results if not isinstance(r, Exception)]
    assert len(opened) == 2
    for log_, _producers in opened:
        assert log_.log_end_offset == 0
        log_.close()
    # Closed cleanly: the next open finds the clean-shutdown marker.
    again = open_partition_logs(jobs[:1])[0]
    assert not isinstance(again, Exception)
    assert again[0].recovery.clean_shutdown
    again[0].close()


def test_new_logs_opened_together_fsync_their_directories_after_the_last_open(
    tmp_path: Path,
) -> None:
    """The directory fsyncs of a batch's new partitions run together once every log of the
    batch is open (at once, so the disk commits them together), and every directory is
    fsynced once. One after the other, each was a disk commit of its own: 5-7 ms a new
    partition. Before, each open fsynced its directory before the next open began."""
    jobs = [OpenJob(tmp_path / "s" / str(p), LogConfig(), "s", p, False) for p in range(12)]
    trace = tmp_path / "trace"
    durability_trace.enable(trace)
    try:
        results = open_partition_logs(jobs)
    finally:
        durability_trace.disable()
    events = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    kinds = [e["ev"] for e in events if e["ev"] in ("create", "dir")]
    assert kinds == ["create"] * 12 + ["dir"] * 12
    synced = sorted(Path(e["path"]) for e in events if e["ev"] == "dir")
    assert synced == sorted(job.directory.resolve() for job in jobs)
    for result in results:
        assert not isinstance(result, Exception), result
        result[0].close()


def test_a_directory_that_does_not_sync_is_reported_and_the_others_sync(tmp_path: Path) -> None:
    directories = [tmp_path / str(i) for i in range(10)]
    for directory in directories:
        directory.mkdir()
    missing = tmp_path / "gone"
    trace = tmp_path / "trace"
    durability_trace.enable(trace)
    try:
        failed = sync_directories([*directories[:5], missing, *directories[5:]], lanes=4)
    finally:
        durability_trace.disable()
    assert list(failed) == [missing]
    assert isinstance(failed[missing], FileNotFoundError)
    events = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    synced = sorted(Path(e["path"]) for e in events if e["ev"] == "dir")
    assert synced == sorted(d.resolve() for d in directories)
    assert sync_directories([]) == {}
