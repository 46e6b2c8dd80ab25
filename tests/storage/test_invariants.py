"""The log's always-on invariant checks on the append path (issue 37 item 5).

The state is broken by hand (as a bug elsewhere in the log would break it); each append
must refuse to write rather than store records past the broken invariant.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jetsdk.codec.record import encode_body, frame_body
from jetserver.storage import InvariantViolation, Log, StorageError

from .helpers import bodies, read_all


def test_append_refuses_when_the_hw_is_above_the_leo(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        log.append(bodies(3), 1, 0)
        log._state.hw = 5  # HW > LEO (3): a bug
        with pytest.raises(InvariantViolation, match="HW 5") as info:
            log.append(bodies(1), 2, 0)
        assert isinstance(info.value, StorageError)  # answered STORAGE_ERROR by a server
        assert isinstance(info.value, AssertionError)
        assert not info.value.retriable
        assert log.log_end_offset == 3  # nothing was written
        assert log.segments()[-1].next_offset == 3


def test_appends_refuse_when_the_leo_is_behind_the_segment(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        log.append(bodies(3), 1, 0)
        # The LEO went back without the segment being cut (a bug): offsets 1 and 2 would
        # be stored twice.
        log._state.leo = 1
        log._state.hw = 1
        with pytest.raises(InvariantViolation, match="already ends at 3"):
            log.append(bodies(1), 2, 0)
        with pytest.raises(InvariantViolation, match="already ends at 3"):
            log.append_raw(frame_body(1, 5, 0, encode_body(b"y")))
        assert log.segments()[-1].next_offset == 3
        log._state.leo = 3
        assert log.append_raw(frame_body(3, 5, 0, encode_body(b"z"))) == 4


def test_invariants_hold_under_normal_use(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        for i in range(20):
            log.append(bodies(5), i, 0)
            log.set_high_watermark(log.log_end_offset - 2)
        log.truncate_to(50)
        log.append(bodies(5), 30, 1)
        log.set_high_watermark(log.log_end_offset)
        assert [r.offset for r in read_all(log)] == list(range(55))
