from __future__ import annotations

import random

import orjson
import pytest

from jetsdk.group.errors import UnsupportedGroupVersion
from jetsdk.group.reader import GroupLogReader
from jetsdk.group.records import Checkpoint, Join, decode_record, encode_record
from jetsdk.group.state import GroupState

from .helpers import GROUP, Log, checkpoint, hb, ns
from .test_state import random_log


def build(seed: int, checkpoints_at: set[int]) -> Log:
    """A random group log with checkpoints (written by 'a') after the given record counts."""
    log = Log()
    t = 0.0
    for i, (record, t) in enumerate(random_log(random.Random(seed), 60)):
        log.add(record, t)
        if i in checkpoints_at:
            log.add(checkpoint("a", log.state), t)
    log.add(hb("a"), t + 0.001)
    return log


def read_all(reader: GroupLogReader, log: Log, *, rounds: int = 10) -> None:
    """Drive the reader like a fetch loop until it is ready at the end of the log."""
    hw = len(log.entries)
    for _ in range(rounds):
        for offset, stamp, value in log.entries[reader.next_offset : hw]:
            reader.feed(offset, stamp, value)
        reader.caught_up(hw)
        if reader.ready and reader.next_offset >= hw:
            return
    raise AssertionError("reader did not finish")


def test_replay_from_zero_needs_no_checkpoint() -> None:
    log = build(1, set())
    reader = GroupLogReader(GROUP)
    assert reader.ready
    read_all(reader, log)
    assert reader.state is not None
    assert reader.state.snapshot() == log.state.snapshot()


@pytest.mark.parametrize("seed", range(8))
def test_start_in_the_middle_uses_a_checkpoint(seed: int) -> None:
    log = build(seed, {20, 40})
    start = 30
    reader = GroupLogReader(GROUP, log_start=10, start=start)
    assert not reader.ready
    read_all(reader, log)
    assert reader.state is not None
    assert reader.state.snapshot() == log.state.snapshot()


def test_checkpoint_right_at_start_fits() -> None:
    log = build(3, {20})
    cp_offset = next(i for i, (_, _, v) in enumerate(log.entries) if b'"checkpoint"' in v)
    reader = GroupLogReader(GROUP, log_start=5, start=cp_offset)  # its as_of is cp_offset - 1
    for offset, stamp, value in log.entries[cp_offset:]:
        reader.feed(offset, stamp, value)
    assert reader.ready
    assert reader.state is not None
    assert reader.state.snapshot() == log.state.snapshot()


def test_checkpoint_needing_earlier_records_rewinds() -> None:
    log = build(4, set())
    # A checkpoint written late, as of an older offset (its writer lagged behind).
    past = GroupState(GROUP)
    for offset, stamp, value in log.entries[:30]:
        past.apply(decode_record(value), offset=offset, timestamp=stamp)
    cp = Checkpoint(group=GROUP, member="a", as_of=29, state=past.snapshot())
    log.add(cp, (log.entries[-1][1] - ns(0)) / 1e9)
    reader = GroupLogReader(GROUP, log_start=10, start=40)
    hw = len(log.entries)
    for offset, stamp, value in log.entries[40:]:
        reader.feed(offset, stamp, value)
    reader.caught_up(hw)
    assert not reader.ready
    assert reader.next_offset == 30  # back to as_of + 1
    read_all(reader, log)
    assert reader.state is not None
    assert reader.state.snapshot() == log.state.snapshot()


def test_without_checkpoint_history_before_log_start_is_lost() -> None:
    log = build(5, set())
    reader = GroupLogReader(GROUP, log_start=25, start=40)
    read_all(reader, log)
    scratch = GroupState(GROUP)
    for offset, stamp, value in log.entries[25:]:
        scratch.apply(decode_record(value), offset=offset, timestamp=stamp)
    assert reader.state is not None
    assert reader.state.snapshot() == scratch.snapshot()


def test_bad_records_are_skipped_and_newer_versions_raise() -> None:
    reader = GroupLogReader(GROUP)
    reader.feed(0, ns(0), b"garbage")
    reader.feed(1, ns(0), orjson.dumps({"v": 1, "type": "x", "group": GROUP, "member": "m"}))
    bad_cp = Checkpoint(group=GROUP, member="a", as_of=5, state={"nope": 1})
    reader.feed(2, ns(0), encode_record(bad_cp))  # ignored by a replaying reader
    assert reader.skipped == 2
    with pytest.raises(UnsupportedGroupVersion):
        reader.feed(3, ns(0), orjson.dumps({"v": 2, "type": "join", "group": GROUP}))


def test_other_groups_newer_records_are_skipped() -> None:
    """Issue 31 case 4: a record of a newer version that is not this group's (another group's,
    or naming none, as a raw ``{"v":99}``) never stops the reader (spec/groups.md §3.1)."""
    reader = GroupLogReader(GROUP)
    assert reader.feed(0, ns(0), b'{"v":99}') == []
    other = {"v": 99, "type": "heartbeat", "group": "attackers", "member": "m"}
    assert reader.feed(1, ns(0), orjson.dumps(other)) == []
    assert reader.feed(2, ns(0), orjson.dumps({"v": 99, "group": 7})) == []
    assert reader.skipped == 3
    assert reader.next_offset == 3
    join = Join(group=GROUP, member="m-1", subscriptions={"s": 1})
    reader.feed(3, ns(1), encode_record(join))
    assert reader.state is not None
    assert [m.member for m in reader.state.members()] == ["m-1"]


def test_malformed_checkpoint_is_skipped_while_bootstrapping() -> None:
    log = build(6, {30})
    bad = Checkpoint(group=GROUP, member="a", as_of=len(log.entries) - 1, state={"bad": True})
    log.entries.append((len(log.entries), log.entries[-1][1], encode_record(bad)))
    reader = GroupLogReader(GROUP, log_start=0, start=len(log.entries) - 1)
    read_all(reader, log)
    assert reader.skipped >= 1
    assert reader.state is not None


def test_reset_after_falling_behind() -> None:
    log = build(7, {30})
    reader = GroupLogReader(GROUP)
    read_all(reader, log)
    reader.reset(20)
    assert not reader.ready
    assert reader.next_offset == 20
    read_all(reader, log)
    assert reader.state is not None
    assert reader.state.snapshot() == log.state.snapshot()
    with pytest.raises(ValueError, match="start"):
        reader.reset(20, 10)
    with pytest.raises(ValueError, match="start"):
        GroupLogReader(GROUP, log_start=5, start=1)
