"""Partition leader election on the metadata leader: the vote rules (pure) and Elections over
a real one-member metadata Raft; the partition leaders' batched ISR changes (Controller)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetserver.cluster import elections as elections_module
from jetserver.cluster.controller import (
    ISR_MAX_BATCH,
    ISR_MAX_BATCH_BYTES,
    Controller,
    isr_batch_size,
    isr_change_bytes,
)
from jetserver.cluster.elections import Elections, awaited, choose_leader, votes_needed
from jetserver.cluster.entry_batches import MAX_BATCH, MAX_BATCH_BYTES, batch_size, election_bytes
from jetserver.cluster.peers import PeerPool
from jetserver.cluster.report_parse import MAX_REPORTS, parse_report, parse_reports
from jetserver.errors import ApiError
from jetserver.metadata.model import PartitionAssignment, StreamSpec
from jetserver.metadata.ops import (
    CreateStream,
    ElectLeader,
    ElectLeaders,
    UpdateIsr,
    UpdateIsrs,
)
from jetserver.raft import MetadataRaft
from jetserver.raft.machine import Entry, encode_entry
from jetserver.replication.control import IsrChange

from .control_kit import one_member_raft

R2 = ("s1", "s2")
R3 = ("s1", "s2", "s3")


def assignment(isr: tuple[str, ...], leader: str = "s1") -> PartitionAssignment:
    return PartitionAssignment(0, leader, ("s1", "s2", "s3"), isr, 4)


@pytest.mark.parametrize(("size", "needed"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3)])
def test_votes_needed_is_a_majority_of_the_isr(size: int, needed: int) -> None:
    assert votes_needed([f"s{i}" for i in range(size)]) == needed


@pytest.mark.parametrize(
    ("isr", "reporters", "down", "expected"),
    [
        (("s1", "s2", "s3"), {"s2"}, False, None),  # one of three
        (("s1", "s2", "s3"), {"s2", "s3"}, False, "s2"),  # two followers agree
        (("s1", "s2", "s3"), {"s3"}, True, "s3"),  # a follower + the leader's own silence
        (("s1", "s2"), {"s2"}, False, None),  # one of two
        (("s1", "s2"), {"s2"}, True, "s2"),  # the leader does not answer anyone
        (("s1",), set(), True, None),  # nobody to take over (no unclean election)
        (("s1", "s3"), {"s2", "s3"}, True, "s3"),  # s2 is not in the ISR: not a candidate
        (("s1", "s2", "s3"), {"s1", "s2"}, False, None),  # the leader's own report is void
    ],
)
def test_choose_leader(
    isr: tuple[str, ...], reporters: set[str], down: bool, expected: str | None
) -> None:
    assert choose_leader(assignment(isr), reporters, down) == expected


def test_choose_leader_prefers_replica_order() -> None:
    a = PartitionAssignment(0, "s2", ("s2", "s3", "s1"), ("s1", "s2", "s3"), 0)
    assert choose_leader(a, {"s1", "s3"}, False) == "s3"


def test_choose_leader_takes_the_reporters_in_turn_by_partition() -> None:
    """Issue 34: every partition a server leads has the same follower order, so the first
    reporter took all of a dead server's leaderships; now the partition number picks."""
    chosen = [
        choose_leader(PartitionAssignment(p, "s1", R3, R3, 0), {"s2", "s3"}, True) for p in range(4)
    ]
    assert chosen == ["s2", "s3", "s2", "s3"]
    # Only reporters are taken: s2 answers probes but did not report (it lacks records).
    assert choose_leader(PartitionAssignment(0, "s1", R3, R3, 0), {"s3"}, True) == "s3"


def test_awaited_are_the_live_members_that_did_not_report() -> None:
    a = PartitionAssignment(0, "s1", R3, R3, 0)
    assert awaited(a, {"s2"}, lambda s: s == "s1") == ["s3"]
    assert awaited(a, {"s2"}, lambda s: s in ("s1", "s3")) == []  # s3 is down too
    assert awaited(a, {"s2", "s3"}, lambda s: False) == []
    assert awaited(PartitionAssignment(0, "s1", R3, ("s1", "s2"), 0), {"s2"}, bool) == []


def test_batches_of_elections_are_bounded_in_count_and_bytes() -> None:
    assert batch_size([]) == 0
    assert batch_size([200] * 10) == 10
    assert batch_size([50] * (MAX_BATCH + 5)) == MAX_BATCH
    big = MAX_BATCH_BYTES // 3
    assert batch_size([big] * 5) == 3
    assert batch_size([MAX_BATCH_BYTES * 2, 10]) == 1  # at least one
    # The estimate bounds the encoded entry: the longest names and numbers.
    name = "x" * 255
    op = ElectLeader(name, 10**6, name, 10**12, "f" * 32, keep_isr=True)
    n = batch_size([election_bytes(op)] * MAX_BATCH)
    encoded = encode_entry(Entry(op_id="e" * 40, op=ElectLeaders((op,) * n)))
    assert len(encoded) <= MAX_BATCH_BYTES + 1024
    short = ElectLeader("s12", 34, "s2", 3, "0123456789abcdef")
    assert batch_size([election_bytes(short)] * 3334) == 3334  # a third of 10,000: one entry


def test_parse_report() -> None:
    req = {"stream": "a", "partition": 1, "leader_epoch": 2, "reporter": "s2"}
    assert parse_report(req) == ("a", 1, 2, "s2")
    for field, bad in (("partition", True), ("leader_epoch", "1"), ("reporter", ""), ("stream", 3)):
        with pytest.raises(ApiError) as info:
            parse_report({**req, field: bad})
        assert info.value.details == {"field": field}


def test_parse_reports() -> None:
    req = {"stream": "a", "partition": 1, "leader_epoch": 2, "reporter": "s2"}
    assert parse_reports({"reports": [req, req]}) == [("a", 1, 2, "s2")] * 2
    for bad in ([req] * (MAX_REPORTS + 1), "x", [3], [{**req, "partition": "1"}]):
        with pytest.raises(ApiError) as info:
            parse_reports({"reports": bad})
        assert info.value.code == ErrorCode.INVALID_ARGUMENT


@pytest.fixture
async def raft(tmp_path: Path) -> AsyncIterator[MetadataRaft]:
    async with one_member_raft(tmp_path) as node:
        yield node


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.anyio
async def test_two_followers_elect_a_new_leader(raft: MetadataRaft) -> None:
    clock = Clock()
    elections = Elections(raft, lambda _s: False, window_s=5.0, clock=clock)
    answer = await elections.report("orders", 0, 0, "s2")
    assert answer == {"accepted": True, "leader": "s1", "leader_epoch": 0}
    clock.now += 6.0  # the first report expired
    answer = await elections.report("orders", 0, 0, "s3")
    assert answer == {"accepted": True, "leader": "s1", "leader_epoch": 0}
    clock.now += 1.0
    answer = await elections.report("orders", 0, 0, "s2")
    assert answer == {"accepted": True, "leader": "s2", "leader_epoch": 1}
    a = raft.state.streams["orders"].partitions[0]
    assert (a.leader, a.isr, a.leader_epoch) == ("s2", ("s2", "s3"), 1)
    assert elections.elections == 1
    # A late report about the old epoch changes nothing.
    answer = await elections.report("orders", 0, 0, "s3")
    assert answer == {"accepted": False, "leader": "s2", "leader_epoch": 1}


@pytest.mark.anyio
async def test_a_leader_that_answers_nobody_counts_as_silent(raft: MetadataRaft) -> None:
    await raft.propose(UpdateIsr("orders", 0, "s1", 0, ("s1", "s3")))
    down = {"s1"}
    elections = Elections(raft, lambda s: s in down, window_s=5.0)
    assert (await elections.report("orders", 0, 0, "s2"))["accepted"] is False  # not in ISR
    answer = await elections.report("orders", 0, 0, "s3")
    assert answer == {"accepted": True, "leader": "s3", "leader_epoch": 1}


@pytest.mark.anyio
async def test_an_election_waits_for_the_other_live_member_and_spreads(
    raft: MetadataRaft,
) -> None:
    """Issue 34: a majority (s2's report and the dead leader's silence) does not elect at
    once while s3, alive, has not reported: with both reports the partition number picks
    the new leader, so a dead server's partitions go to both survivors."""
    spec = StreamSpec(name="wide", subject="wide", partitions=2, replication_factor=3)
    assert (await raft.propose(CreateStream(spec, "id2", 1, (R3, R3)))).result.ok
    elections = Elections(raft, lambda s: s == "s1", window_s=5.0, collect_s=30.0)
    answers: dict[str, dict[str, Any]] = {}

    async def report(reporter: str) -> None:
        answers[reporter] = await elections.report("wide", 1, 0, reporter)

    with anyio.fail_after(10):  # far below collect_s: s3's report ends the wait
        async with anyio.create_task_group() as tg:
            tg.start_soon(report, "s2")
            while elections._reports.get(("wide", 1)) is None or (
                elections._reports[("wide", 1)].majority_at is None
            ):
                await anyio.lowlevel.checkpoint()
            a = raft.state.streams["wide"].partitions[1]
            assert (a.leader, a.leader_epoch) == ("s1", 0)  # a majority, and still waiting
            assert "s2" not in answers
            tg.start_soon(report, "s3")
    assert answers["s2"] == answers["s3"] == {"accepted": True, "leader": "s3", "leader_epoch": 1}
    assert elections.elections == 1


@pytest.mark.anyio
async def test_a_live_member_that_does_not_report_is_waited_for_briefly_and_not_elected(
    raft: MetadataRaft,
) -> None:
    """The bit-rot case (tests/cluster/test_faults_bitrot.py): s3 answers probes but does
    not report (recovery found damaged records): after collect_s the reporter s2 leads,
    although the partition number would have taken s3 among two reporters."""
    spec = StreamSpec(name="wide", subject="wide", partitions=2, replication_factor=3)
    assert (await raft.propose(CreateStream(spec, "id2", 1, (R3, R3)))).result.ok
    elections = Elections(raft, lambda s: s == "s1", window_s=5.0, collect_s=0.3)
    started = time.monotonic()
    with anyio.fail_after(10):
        answer = await elections.report("wide", 1, 0, "s2")
    assert time.monotonic() - started >= 0.3
    assert answer == {"accepted": True, "leader": "s2", "leader_epoch": 1}


@pytest.mark.anyio
async def test_elections_reported_together_go_in_one_raft_entry(raft: MetadataRaft) -> None:
    spec = StreamSpec(name="wide", subject="wide", partitions=40, replication_factor=3)
    replicas = (("s1", "s2", "s3"),) * 40
    assert (await raft.propose(CreateStream(spec, "id2", 1, replicas))).result.ok
    elections = Elections(raft, lambda s: s == "s1", window_s=5.0)  # s1, the leader, is down
    index_before = raft.index
    answers: dict[int, dict[str, object]] = {}

    async def report(p: int) -> None:
        answers[p] = await elections.report("wide", p, 0, "s2")

    async with anyio.create_task_group() as tg:
        for p in range(40):
            tg.start_soon(report, p)
    assert all(answers[p] == {"accepted": True, "leader": "s2", "leader_epoch": 1} for p in answers)
    assert len(answers) == 40
    assert elections.elections == 40
    # Reports that arrive together are proposed together: far fewer entries than elections.
    assert elections.entries <= 3
    assert raft.index - index_before == elections.entries
    assert all(a.leader == "s2" for a in raft.state.streams["wide"].partitions)
    # Reported again (a follower that did not hear the answer): refused as stale, no entry.
    assert (await elections.report("wide", 0, 0, "s3"))["accepted"] is False
    assert elections.entries <= 3


@pytest.mark.anyio
async def test_more_than_a_thousand_elections_reported_together_go_in_one_entry(
    raft: MetadataRaft, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: a dead server's 3,334 leaderships at 10,000 partitions took four entries
    of at most 1,000, each proposed while the survivors applied the earlier ones' role
    changes. 1,200 elections gathered together now take one."""
    for i in range(12):
        spec = StreamSpec(name=f"w{i}", subject=f"w{i}", partitions=100, replication_factor=3)
        assert (await raft.propose(CreateStream(spec, f"id-w{i}", 1, (R3,) * 100))).result.ok
    monkeypatch.setattr(elections_module, "BATCH_GATHER_S", 2.0)  # all of them join
    elections = Elections(raft, lambda s: s in ("s1", "s3"), window_s=5.0)  # s2 alone is up
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(12):
                for p in range(100):
                    tg.start_soon(elections.report, f"w{i}", p, 0, "s2")
    assert elections.elections == 1200
    assert elections.entries == 1
    assert all(a.leader == "s2" for i in range(12) for a in raft.state.streams[f"w{i}"].partitions)


@pytest.mark.anyio
async def test_elections_that_keep_coming_join_the_batch_being_gathered(
    raft: MetadataRaft, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: at 10,000 partitions a dead server's reports come in requests of 1,000
    tens of milliseconds apart, each decided over more than one gathering period; a batch
    now gathers on while elections keep joining it (up to BATCH_GATHER_MAX_S), instead of
    an entry per period. Waves 50 ms apart over 350 ms, periods of 200 ms: one entry."""
    spec = StreamSpec(name="wide", subject="wide", partitions=80, replication_factor=3)
    assert (await raft.propose(CreateStream(spec, "id2", 1, (R3,) * 80))).result.ok
    monkeypatch.setattr(elections_module, "BATCH_GATHER_S", 0.2)
    monkeypatch.setattr(elections_module, "BATCH_GATHER_MAX_S", 5.0)
    elections = Elections(raft, lambda s: s in ("s1", "s3"), window_s=5.0)  # s2 alone is up
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for wave in range(8):
                for p in range(wave * 10, wave * 10 + 10):
                    tg.start_soon(elections.report, "wide", p, 0, "s2")
                await anyio.sleep(0.05)
    assert elections.elections == 80
    assert elections.entries == 1


@pytest.mark.anyio
async def test_an_election_whose_report_was_cancelled_before_its_batch_is_not_proposed(
    raft: MetadataRaft, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: a report cancelled while its election waited for a batch (a delivery cut
    by its time bound) left the election queued after releasing the partition's lock; the
    next report decided it again, and at 3,000 partitions an entry of 999 such duplicates
    (all refused) took 7 s of the metadata Raft in a failover."""
    spec = StreamSpec(name="wide", subject="wide", partitions=2, replication_factor=3)
    assert (await raft.propose(CreateStream(spec, "id2", 1, (R3, R3)))).result.ok
    elections = Elections(raft, lambda s: s == "s1", window_s=5.0)  # s1, the leader, is down
    caplog.set_level(logging.INFO, logger="jetserver.cluster.elections")
    monkeypatch.setattr(elections_module, "BATCH_GATHER_S", 0.5)  # room to cancel in
    cancelled = anyio.CancelScope()

    async def cancelled_report() -> None:
        with cancelled:
            await elections.report("wide", 1, 0, "s2")

    async with anyio.create_task_group() as tg:
        tg.start_soon(elections.report, "wide", 0, 0, "s2")  # gathers a batch
        tg.start_soon(cancelled_report)  # joins the batch being gathered
        with anyio.fail_after(5):
            while len(elections._queue) < 2:  # both elections decided and queued
                await anyio.lowlevel.checkpoint()
        cancelled.cancel()  # before the batch is taken
    parts = raft.state.streams["wide"].partitions
    assert [(a.leader, a.leader_epoch) for a in parts] == [("s2", 1), ("s1", 0)]
    # Reported again: decided and proposed once.
    answer = await elections.report("wide", 1, 0, "s3")
    # s2's cancelled report still counts (within the window): of the two reporters, the
    # partition number takes s3 (partition 1 of [s2, s3]).
    assert answer == {"accepted": True, "leader": "s3", "leader_epoch": 1}
    assert "leader election refused" not in caplog.text
    assert elections.elections == 2


@pytest.mark.anyio
async def test_a_report_while_an_election_of_a_cancelled_report_is_proposed_waits_for_it(
    raft: MetadataRaft, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: a report cancelled once its election was in a batch being proposed (a
    delivery cut by its bound) released the partition's lock; the next report decided the
    election again and proposed it in the next entry, refused there (at 10,000 partitions,
    573 of an entry's 1,000 elections). Now it waits for the election in flight."""
    spec = StreamSpec(name="wide", subject="wide", partitions=2, replication_factor=3)
    assert (await raft.propose(CreateStream(spec, "id2", 1, (R3, R3)))).result.ok
    elections = Elections(raft, lambda s: s == "s1", window_s=5.0, collect_s=0.0)
    caplog.set_level(logging.INFO, logger="jetserver.cluster.elections")
    proposing, release = anyio.Event(), anyio.Event()
    real_propose = raft.propose

    async def held_propose(*args: Any, **kwargs: Any) -> Any:
        proposing.set()
        await release.wait()
        return await real_propose(*args, **kwargs)

    monkeypatch.setattr(raft, "propose", held_propose)
    cancelled = anyio.CancelScope()
    answers: list[dict[str, Any]] = []

    async def cancelled_report() -> None:
        with cancelled:
            await elections.report("wide", 1, 0, "s2")

    async def second_report() -> None:
        answers.append(await elections.report("wide", 1, 0, "s3"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(elections.report, "wide", 0, 0, "s2")  # gathers and proposes the batch
        tg.start_soon(cancelled_report)  # its election joins that batch
        with anyio.fail_after(5):
            await proposing.wait()  # both elections are in the batch being proposed
        cancelled.cancel()
        await anyio.lowlevel.checkpoint()  # the cancelled report let go of partition 1
        tg.start_soon(second_report)
        for _ in range(50):  # the second report runs as far as it goes
            await anyio.lowlevel.checkpoint()
        assert answers == []  # it waits for the election in flight
        release.set()
    assert answers == [{"accepted": True, "leader": "s2", "leader_epoch": 1}]
    parts = raft.state.streams["wide"].partitions
    assert [(a.leader, a.leader_epoch) for a in parts] == [("s2", 1), ("s2", 1)]
    assert "leader election refused" not in caplog.text
    assert elections.entries == 1  # both elections, once, in one entry


@pytest.mark.anyio
async def test_partitions_of_a_dead_leader_that_nobody_reports_are_found(
    raft: MetadataRaft,
) -> None:
    """Issue 34: at 20,000 partitions 31 kept their dead leader for minutes with a full ISR;
    the metadata leader now names such partitions (leader down here, another ISR member,
    no report about them within the window) so that a run shows which side lost them."""
    spec = StreamSpec(name="solo", subject="solo", replication_factor=1)
    assert (await raft.propose(CreateStream(spec, "id3", 1, (("s1",),)))).result.ok
    clock = Clock()
    down = {"s1"}
    elections = Elections(raft, lambda s: s in down, window_s=5.0, clock=clock)
    # orders/0 (s1 leads, ISR s1, s2, s3) is listed; solo/0 (s1 alone) cannot move.
    assert elections.unreported() == [("orders", 0)]
    answer = await elections.report("orders", 0, 7, "s2")  # a stale epoch: not counted
    assert answer["accepted"] is False
    assert elections.unreported() == []  # but a report about it arrived
    clock.now += 6.0
    assert elections.unreported() == [("orders", 0)]
    down.clear()
    assert elections.unreported() == []  # its leader answers


@pytest.mark.anyio
async def test_reports_about_unknown_partitions(raft: MetadataRaft) -> None:
    elections = Elections(raft, lambda _s: False)
    with pytest.raises(ApiError) as info:
        await elections.report("nope", 0, 0, "s2")
    assert info.value.code == ErrorCode.STREAM_NOT_FOUND
    with pytest.raises(ApiError) as info:
        await elections.report("orders", 3, 0, "s2")
    assert info.value.code == ErrorCode.PARTITION_NOT_FOUND


@pytest.mark.anyio
async def test_isr_changes_proposed_together_go_in_one_raft_entry(raft: MetadataRaft) -> None:
    spec = StreamSpec(name="wide", subject="wide", partitions=40, replication_factor=3)
    replicas = (("s1", "s2", "s3"),) * 40
    assert (await raft.propose(CreateStream(spec, "id2", 1, replicas))).result.ok
    controller = Controller(
        "s1", raft, PeerPool(), Elections(raft, lambda _s: False), client_addresses=dict
    )
    index_before = raft.index
    accepted: dict[int, bool] = {}

    async def shrink(p: int) -> None:
        # s3 (a dead follower) leaves every ISR; partition 7 is proposed from a stale view.
        epoch = 5 if p == 7 else 0
        accepted[p] = await controller.propose_isr(
            "wide", p, 0, ("s1", "s2"), partition_epoch=epoch
        )

    async with anyio.create_task_group() as tg:
        for p in range(40):
            tg.start_soon(shrink, p)
    assert accepted == {p: p != 7 for p in range(40)}  # each change checked on its own
    parts = raft.state.streams["wide"].partitions
    assert [a.isr for a in parts] == [R2 if p != 7 else R3 for p in range(40)]
    assert controller.isr_changes == 39
    assert controller.isr_entries <= 3
    assert raft.index - index_before == controller.isr_entries
    # A lone change afterwards is its own update_isr entry.
    assert await controller.propose_isr("wide", 7, 0, ("s1", "s2"), partition_epoch=0)
    assert raft.state.streams["wide"].partitions[7].isr == R2
    assert raft.index - index_before == controller.isr_entries


def test_batches_of_isr_changes_are_bounded_in_count_and_bytes() -> None:
    assert isr_batch_size([]) == 0
    assert isr_batch_size([50] * (ISR_MAX_BATCH + 5)) == ISR_MAX_BATCH
    assert isr_batch_size([ISR_MAX_BATCH_BYTES * 2, 10]) == 1  # at least one
    # The estimate bounds the encoded entry: the longest names and numbers.
    name, server = "x" * 255, "s" * 64
    isr = (server, server + "2", server + "3")
    op = UpdateIsr(name, 10**6, server, 10**12, isr, "f" * 32, 10**12)
    n = isr_batch_size([isr_change_bytes(op)] * ISR_MAX_BATCH)
    encoded = encode_entry(Entry(op_id="isr-" + "e" * 32, op=UpdateIsrs((op,) * n)))
    assert len(encoded) <= ISR_MAX_BATCH_BYTES + 1024
    long_stream = UpdateIsr(name, 10**6, "s1", 10**12, R3, "f" * 32, 10**12)
    assert isr_batch_size([isr_change_bytes(long_stream)] * 3334) >= 1000  # as before
    short = UpdateIsr("s12", 34, "s1", 3, ("s1", "s2"), "0123456789abcdef" * 2, 7)
    assert isr_batch_size([isr_change_bytes(short)] * 3334) == 3334  # a third of 10,000


async def _wide_stream_led_here(raft: MetadataRaft, n: int) -> Controller:
    """Stream ``wide`` of ``n`` partitions led by s1 (ISR s1, s2, s3); s1's controller."""
    spec = StreamSpec(name="wide", subject="wide", partitions=n, replication_factor=3)
    assert (await raft.propose(CreateStream(spec, "id2", 1, (R3,) * n))).result.ok
    return Controller(
        "s1", raft, PeerPool(), Elections(raft, lambda _s: False), client_addresses=dict
    )


@pytest.mark.anyio
async def test_a_dead_followers_shrinks_go_in_one_entry_past_a_thousand(
    raft: MetadataRaft,
) -> None:
    """1,500 partitions led here drop their dead follower at once: one UpdateIsrs entry
    (until 2026-11-29 at most 1,000 per entry: two, the second waiting for the first)."""
    n = 1500
    controller = await _wide_stream_led_here(raft, n)
    index_before = raft.index
    accepted: list[bool] = []

    async def shrink(p: int) -> None:
        accepted.append(await controller.propose_isr("wide", p, 0, R2, partition_epoch=0))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for p in range(n):
                tg.start_soon(shrink, p)
    assert accepted == [True] * n
    assert all(a.isr == R2 for a in raft.state.streams["wide"].partitions)
    assert controller.isr_entries == 1
    assert raft.index - index_before == 1


@pytest.mark.anyio
async def test_a_sweeps_isr_changes_go_in_one_entry_with_each_outcome_in_order(
    raft: MetadataRaft,
) -> None:
    """The ISR sweep (``broker.isr_sweep``) hands the controller one round's changes in
    one call: one UpdateIsrs entry, each change checked on its own, the outcomes in the
    order given (a stream gone meanwhile: refused without a proposal)."""
    n = 1500
    controller = await _wide_stream_led_here(raft, n)
    index_before = raft.index
    changes = [IsrChange("wide", p, 0, R2, 5 if p == 7 else 0) for p in range(n)]
    changes.insert(3, IsrChange("gone", 0, 0, R2, 0))
    with anyio.fail_after(60):
        accepted = await controller.propose_isrs(changes)
    assert accepted == [c.stream == "wide" and c.partition != 7 for c in changes]
    parts = raft.state.streams["wide"].partitions
    assert [a.isr for a in parts] == [R2 if p != 7 else R3 for p in range(n)]
    assert controller.isr_entries == 1
    assert raft.index - index_before == 1


@pytest.mark.anyio
async def test_a_stopping_server_reports_no_silent_leader_and_is_not_elected(
    raft: MetadataRaft,
) -> None:
    """Issue 31, item 5: a server in its graceful stop does not report a silent leader
    (the first reporter in replica order is elected, and it is about to go); another
    live follower's report, with the leader's silence, moves the leadership to that one."""
    down = {"s1"}  # the leader (killed)
    elections = Elections(raft, lambda s: s in down, window_s=5.0)
    stopping = Controller("s2", raft, PeerPool(), elections, client_addresses=dict)
    stopping.stopping = True
    await stopping.report_leader_silent("orders", 0, 0, "s2")
    assert stopping.reports_sent == 0
    a = raft.state.streams["orders"].partitions[0]
    assert (a.leader, a.leader_epoch) == ("s1", 0)  # s2 + the leader's silence would elect s2
    live = Controller("s3", raft, PeerPool(), elections, client_addresses=dict)
    await live.report_leader_silent("orders", 0, 0, "s3")
    a = raft.state.streams["orders"].partitions[0]
    assert (a.leader, a.leader_epoch) == ("s3", 1)


@pytest.mark.anyio
async def test_a_report_of_an_epoch_already_elected_past_is_not_sent(raft: MetadataRaft) -> None:
    """A failover's old followers keep reporting until their new roles apply: a report of
    epoch 0 once this server's metadata has the partition at epoch 1 is not sent (the
    metadata leader would answer it "not accepted"; until 2026-11-29 it was sent: 1,000 of
    them took the metadata leader 4.6 s at 3,000 partitions)."""
    elections = Elections(raft, lambda s: s == "s1", window_s=5.0)  # s1, the leader, is down
    controller = Controller("s3", raft, PeerPool(), elections, client_addresses=dict)
    assert (await raft.propose(ElectLeader("orders", 0, "s2", 1))).result.ok
    await controller.report_leader_silent("orders", 0, 0, "s3")  # the old epoch's follower
    assert (controller.reports_sent, controller.report_batches) == (0, 0)
    assert controller.reports_stale == 1
    a = raft.state.streams["orders"].partitions[0]
    assert (a.leader, a.leader_epoch) == ("s2", 1)
    await controller.report_leader_silent("orders", 0, 1, "s3")  # the current epoch: sent
    assert controller.reports_sent == 1


@pytest.mark.anyio
async def test_silent_leader_reports_made_together_go_out_together(raft: MetadataRaft) -> None:
    """Every partition a dead server led here reports it at once: the controller sends them
    in a few batches (one ReportLeader with ``reports`` each when remote), not one request
    per partition; each report is counted on its own (an unknown partition's error does not
    fail the others)."""
    spec = StreamSpec(name="wide", subject="wide", partitions=40, replication_factor=3)
    replicas = (("s1", "s2", "s3"),) * 40
    assert (await raft.propose(CreateStream(spec, "id2", 1, replicas))).result.ok
    elections = Elections(raft, lambda s: s == "s1", window_s=5.0)  # s1, the leader, is down
    controller = Controller("s2", raft, PeerPool(), elections, client_addresses=dict)
    async with anyio.create_task_group() as tg:
        for p in range(40):
            tg.start_soon(controller.report_leader_silent, "wide", p, 0, "s2")
    assert controller.reports_sent == 40
    assert controller.report_batches <= 3
    assert all(a.leader == "s2" for a in raft.state.streams["wide"].partitions)
    answers = await elections.report_many([("wide", 0, 1, "s3"), ("nope", 0, 0, "s3")])
    assert answers[0] == {"accepted": True, "leader": "s2", "leader_epoch": 1}
    assert answers[1]["error_code"] == ErrorCode.STREAM_NOT_FOUND


class FirstBatchHeld(Elections):
    """Elections whose first batch of reports is held until a second batch arrives (or a
    bound passes): shows whether batches are delivered while another is in flight."""

    held_s = 5.0

    def hold(self) -> None:
        self.calls = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.first_in = anyio.Event()
        self.second_in = anyio.Event()

    async def report_many(self, reports: Collection[tuple[str, int, int, str]]) -> Any:
        self.calls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.calls == 1:
                self.first_in.set()
                with anyio.move_on_after(self.held_s):
                    await self.second_in.wait()
            else:
                self.second_in.set()
            return await super().report_many(reports)
        finally:
            self.in_flight -= 1


@pytest.mark.anyio
async def test_a_batch_of_reports_goes_while_the_one_before_is_in_flight(
    raft: MetadataRaft,
) -> None:
    """A dead server's second thousand leaderships on a survivor were reported only once
    the first thousand's elections were applied (the metadata leader answers a report after
    its election): batches are delivered concurrently now (up to REPORTS_IN_FLIGHT)."""
    spec = StreamSpec(name="wide", subject="wide", partitions=10, replication_factor=3)
    replicas = (("s1", "s2", "s3"),) * 10
    assert (await raft.propose(CreateStream(spec, "id2", 1, replicas))).result.ok
    elections = FirstBatchHeld(raft, lambda s: s == "s1", window_s=10.0)  # s1 is down
    elections.hold()
    controller = Controller("s2", raft, PeerPool(), elections, client_addresses=dict)
    started = time.monotonic()
    with anyio.fail_after(3 * FirstBatchHeld.held_s):
        async with anyio.create_task_group() as tg:
            tg.start_soon(controller.report_leader_silent, "wide", 0, 0, "s2")
            await elections.first_in.wait()  # the first batch is in flight (held)
            for p in range(1, 10):
                tg.start_soon(controller.report_leader_silent, "wide", p, 0, "s2")
    assert elections.most_in_flight == 2, "the second batch waited for the first"
    assert time.monotonic() - started < FirstBatchHeld.held_s
    assert controller.report_batches == 2
    assert all(a.leader == "s2" for a in raft.state.streams["wide"].partitions)
