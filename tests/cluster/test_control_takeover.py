"""The metadata leader elects a gone server's partitions from its own liveness view
(jetserver.cluster.takeover): the plan (pure), the elections over a real one-member
metadata Raft with no report sent, and reports that arrive meanwhile; a follower whose log
was found damaged leaves the ISR (Controller.leave_isr), so it is never elected that way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest

from jetserver.cluster.controller import Controller, per_leader
from jetserver.cluster.elections import Elections
from jetserver.cluster.peers import PeerPool
from jetserver.cluster.report_hold import ReportHold
from jetserver.cluster.takeover import Takeover, plan_takeover
from jetserver.metadata.model import MetadataState, StreamSpec
from jetserver.metadata.ops import CreateStream, ElectLeader, RegisterServer, UpdateIsr
from jetserver.raft import MetadataRaft

from .control_kit import one_member_raft

R3 = ("s1", "s2", "s3")


@pytest.fixture
async def raft(tmp_path: Path) -> AsyncIterator[MetadataRaft]:
    async with one_member_raft(tmp_path) as node:
        for i, server in enumerate(R3):  # registered, as the servers do at start
            op = RegisterServer(
                server, f"127.0.0.1:{9000 + i}", f"127.0.0.1:{9100 + i}", "a", clean=True
            )
            assert (await node.propose(op)).result.ok
        yield node


async def create(raft: MetadataRaft, name: str, replicas: tuple[tuple[str, ...], ...]) -> None:
    spec = StreamSpec(name=name, subject=name, partitions=len(replicas), replication_factor=3)
    assert (await raft.propose(CreateStream(spec, f"id-{name}", 1, replicas))).result.ok


def leaders(state: MetadataState, name: str) -> list[tuple[str | None, int, tuple[str, ...]]]:
    return [(a.leader, a.leader_epoch, a.isr) for a in state.streams[name].partitions]


@pytest.mark.anyio
async def test_plan_spreads_a_gone_leaders_partitions_over_the_members_that_answer(
    raft: MetadataRaft,
) -> None:
    await create(raft, "wide", (R3, R3, R3, R3, ("s2", "s1", "s3"), ("s1",)))
    # wide/3: its ISR is s1 and s3 only; wide/5: s1 alone (never moved: no unclean election).
    assert (await raft.propose(UpdateIsr("wide", 3, "s1", 0, ("s1", "s3")))).result.ok
    ops = plan_takeover(raft.state, {"s1"}.__contains__, lambda _s: True)
    wide = [(op.partition, op.leader, op.leader_epoch) for op in ops if op.stream == "wide"]
    # Live members in replica order, taken by partition number: s2, s3, s2, (s3 alone).
    assert wide == [(0, "s2", 1), (1, "s3", 1), (2, "s2", 1), (3, "s3", 1)]
    assert [(op.stream, op.partition) for op in ops if op.stream != "wide"] == [("orders", 0)]
    # s3 does not answer its probes (paused, overloaded): only s2 is elected, and the
    # partition whose other ISR member is s3 alone waits for the reports path.
    ops = plan_takeover(raft.state, {"s1"}.__contains__, lambda s: s != "s3")
    assert [(op.partition, op.leader) for op in ops if op.stream == "wide"] == [
        (0, "s2"),
        (1, "s2"),
        (2, "s2"),
    ]
    assert plan_takeover(raft.state, lambda _s: False, lambda _s: True) == []


@pytest.mark.anyio
async def test_a_gone_servers_partitions_move_with_no_report(raft: MetadataRaft) -> None:
    """Issue 34: the metadata leader no longer waits for the survivors' ReportLeader (2.3 to
    3.0 s to arrive at 10,000 partitions): its own view that s1's process is gone elects
    s1's partitions in one entry, spread over s2 and s3."""
    await create(raft, "wide", (R3,) * 6)
    gone: set[str] = set()
    elections = Elections(raft, gone.__contains__)
    takeover = Takeover(raft, elections, gone.__contains__, lambda s: s not in gone)
    assert await takeover.take_over() == 0  # nobody gone
    gone.add("s1")
    with anyio.fail_after(10):
        assert await takeover.take_over() == 7
    assert leaders(raft.state, "wide") == [(["s2", "s3"][p % 2], 1, ("s2", "s3")) for p in range(6)]
    assert elections.entries == 1
    assert elections.elections == 7
    assert await takeover.take_over() == 0  # nothing left to move
    # A report about the old epoch, late: answered with the new leader, nothing proposed.
    answer = await elections.report("wide", 1, 0, "s2")
    assert answer == {"accepted": False, "leader": "s3", "leader_epoch": 1}
    assert elections.entries == 1


@pytest.mark.anyio
async def test_a_report_during_the_takeover_waits_for_its_election(raft: MetadataRaft) -> None:
    """A survivor's report arriving while the takeover's entry is being proposed counts and
    answers from that election's outcome: no second election of the same epoch (one
    would be refused, in an entry of its own)."""
    gone = {"s1"}
    elections = Elections(raft, gone.__contains__, collect_s=0.0)
    answers: list[dict[str, Any]] = []
    applied: list[ElectLeader] = []

    async def take_over() -> None:
        op = ElectLeader("orders", 0, "s3", 1, raft.state.streams["orders"].stream_id)
        applied.extend(await elections.propose_now([op]))

    async def report() -> None:
        answers.append(await elections.report("orders", 0, 0, "s2"))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(take_over)
            await anyio.lowlevel.checkpoint()  # the takeover's election is proposed
            tg.start_soon(report)
    assert [op.leader for op in applied] == ["s3"]
    assert answers == [{"accepted": True, "leader": "s3", "leader_epoch": 1}]
    assert elections.entries == 1
    assert elections.elections == 1


@pytest.mark.anyio
async def test_the_takeovers_entry_goes_to_raft_before_the_loop_turns(
    raft: MetadataRaft, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's death wakes thousands of its followers' tasks on the metadata leader. The
    takeover's entry went to Raft two passes of the loop after ``propose_now`` (a task of
    its own, then the limiter's checkpoint), each behind every task woken meanwhile
    (since_report_s 0.3-0.75 s at 3,000 partitions, load 9-10). Now it is submitted in the
    takeover's own step: a task made ready before it has not run yet."""
    elections = Elections(raft, {"s1"}.__contains__)
    ran: list[str] = []
    seen_at_submit: list[list[str]] = []
    propose = raft.propose

    async def spy(op: Any, **kwargs: Any) -> Any:
        seen_at_submit.append(list(ran))
        return await propose(op, **kwargs)

    async def woken() -> None:
        ran.append("woken")

    monkeypatch.setattr(raft, "propose", spy)
    op = ElectLeader("orders", 0, "s2", 1, raft.state.streams["orders"].stream_id)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(woken)
            applied = await elections.propose_now([op])
    assert applied == [op]
    assert seen_at_submit == [[]]
    assert leaders(raft.state, "orders") == [("s2", 1, ("s2", "s3"))]


@pytest.mark.anyio
async def test_a_damaged_follower_leaves_the_isr_and_is_not_elected(raft: MetadataRaft) -> None:
    """A follower whose recovery found its log damaged takes itself out of the ISR
    (LeaveIsr), so the takeover, which elects ISR members without their reports, cannot
    pick it: s1's partition goes to s2 although its number would pick s3."""
    await create(raft, "wide", (R3, R3))
    elections = Elections(raft, lambda _s: False)
    damaged = Controller("s3", raft, PeerPool(), elections, client_addresses=dict)
    with anyio.fail_after(10):
        assert await damaged.leave_isr("wide", 1)
    assert leaders(raft.state, "wide")[1] == ("s1", 0, ("s1", "s2"))
    takeover = Takeover(raft, elections, {"s1"}.__contains__, lambda s: s != "s1")
    with anyio.fail_after(10):
        await takeover.take_over()
    assert leaders(raft.state, "wide")[1] == ("s2", 1, ("s2",))
    assert not await damaged.leave_isr("gone-stream", 0)  # a stream that is not there


@pytest.mark.anyio
async def test_a_damaged_replica_named_leader_hands_over_to_another_isr_member(
    raft: MetadataRaft,
) -> None:
    """The race the LeaveIsr leaves (tests/cluster/test_faults_bitrot.py, run on the first
    version of the takeover): s2, damaged, was elected before it left the ISR. It does not
    lead; it elects the other ISR member that answers (s3) at the next epoch, which drops
    it from the ISR. Before, it waited for reports, and with an ISR of two the one
    follower's reports never made a majority: no leader at all."""
    gone = {"s1"}
    elections = Elections(raft, gone.__contains__)
    stream_id = raft.state.streams["orders"].stream_id
    assert (await raft.propose(ElectLeader("orders", 0, "s2", 1, stream_id))).result.ok
    damaged = Controller(
        "s2", raft, PeerPool(), elections, client_addresses=dict, is_down=gone.__contains__
    )
    with anyio.fail_after(10):
        assert not await damaged.hand_over("orders", 0, 0)  # a stale epoch: nothing
        assert await damaged.hand_over("orders", 0, 1)
    assert leaders(raft.state, "orders") == [("s3", 2, ("s3",))]
    assert not await damaged.hand_over("orders", 0, 2)  # not its leadership any more


@pytest.mark.anyio
async def test_the_metadata_leader_does_not_report_a_gone_servers_partitions(
    raft: MetadataRaft,
) -> None:
    """Its own replicas' reports about a gone leader (3,334 at 10,000 partitions) only
    kept its event loop busy: the takeover elects those partitions. A leader that is merely
    down (probes time out) is still reported."""
    gone: set[str] = set()
    elections = Elections(raft, gone.__contains__, collect_s=0.0)
    me = Controller(
        "s2", raft, PeerPool(), elections, client_addresses=dict, is_gone=gone.__contains__
    )
    gone.add("s1")
    with anyio.fail_after(10):
        await me.report_leader_silent("orders", 0, 0, "s2")
    assert me.reports_sent == 0
    assert leaders(raft.state, "orders") == [("s1", 0, R3)]
    gone.clear()
    with anyio.fail_after(10):
        await me.report_leader_silent("orders", 0, 0, "s2")
    assert me.reports_sent == 1


@attrs.define
class FollowerView:
    """The metadata Raft as a server that does not lead it sees it (what ReportHold reads:
    the leader and the applied state); the state is the real Raft's."""

    raft: MetadataRaft
    leader_id: str | None = "s3"
    is_leader: bool = False

    @property
    def state(self) -> MetadataState:
        return self.raft.state


def report_hold(view: FollowerView, gone: set[str], now: list[float]) -> ReportHold:
    return ReportHold(
        view,  # type: ignore[arg-type]
        gone.__contains__,
        lambda s: s in gone,
        clock=lambda: now[0],
    )


@pytest.mark.anyio
async def test_reports_are_held_while_the_takeovers_elections_apply(raft: MetadataRaft) -> None:
    """Past the grace (3 s), reports about a gone server stay held while its partitions'
    elections are being applied here, and go once that stops for PROGRESS_S (until
    2026-11-29 the grace alone decided: at 10,000 partitions the takeover's entry applied
    up to 3.6 s after the kill, and the reports came back before it)."""
    await create(raft, "wide", (R3,) * 4)
    gone, now, view = {"s1"}, [100.0], FollowerView(raft)
    hold = report_hold(view, gone, now)
    me = Controller("s2", raft, PeerPool(), Elections(raft, gone.__contains__), dict)
    me.is_gone, me.hold = gone.__contains__, hold
    ended = me.report_hold("s1")
    assert ended is not None
    assert not ended.is_set()
    assert me.report_hold("s2") is None  # not gone: not held
    assert hold.held_reports == 1  # counted for the summary line
    stream_id = raft.state.streams["wide"].stream_id
    now[0] = 102.5  # the takeover's first entry applies (within the grace)
    assert (await raft.propose(ElectLeader("wide", 0, "s2", 1, stream_id))).result.ok
    assert hold.held("s1")
    now[0] = 103.5  # past the grace: held, its elections applied 1 s ago
    assert hold.held("s1")
    now[0] = 104.2
    assert (await raft.propose(ElectLeader("wide", 1, "s3", 1, stream_id))).result.ok
    assert hold.held("s1")  # seen applied now (its task looks every TICK_S)
    now[0] = 105.5
    assert hold.held("s1")
    now[0] = 105.8  # 1.6 s without progress: the reports go
    assert not hold.held("s1")
    assert ended.is_set()
    assert me.report_hold("s1") is None  # not held again while it stays gone
    gone.clear()
    assert me.report_hold("s1") is None
    gone.add("s1")  # gone again (it came back meanwhile): a new hold
    again = me.report_hold("s1")
    assert again is not None
    assert not again.is_set()


@pytest.mark.anyio
async def test_reports_are_held_while_the_metadata_raft_elects_a_leader(
    raft: MetadataRaft,
) -> None:
    """The gone server led the metadata too: held while no other metadata leader is known
    (the next one looks when it leads), then for the grace from when it is; a takeover
    that does not come then lets the reports go. A server that leads nothing here any more
    is not held."""
    await create(raft, "wide", (R3,) * 2)
    gone, now, view = {"s1"}, [100.0], FollowerView(raft, leader_id="s1")
    hold = report_hold(view, gone, now)
    assert hold.held("s1")
    view.leader_id = None
    now[0] = 108.0
    assert hold.held("s1")  # electing (within HOLD_MAX_S)
    view.leader_id = "s3"
    now[0] = 110.0
    assert hold.held("s1")  # s3 seen leading now: the grace counts from here
    now[0] = 112.9
    assert hold.held("s1")
    now[0] = 113.1
    assert not hold.held("s1")  # no election seen: reports go
    gone2, view2 = {"s2"}, FollowerView(raft)
    assert not report_hold(view2, gone2, now).held("s2")  # s2 leads nothing


@pytest.mark.anyio
async def test_the_hold_ends_when_the_server_answers_again(raft: MetadataRaft) -> None:
    """Followers wait on the hold's event: its task sets it when the server is no longer
    gone (bounded wait, no other wake-up)."""
    await create(raft, "wide", (R3,))
    gone, now = {"s1"}, [100.0]
    hold = report_hold(FollowerView(raft), gone, now)
    ended = hold.ended("s1")
    assert ended is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold.run)
        await anyio.lowlevel.checkpoint()
        assert not ended.is_set()
        gone.clear()
        with anyio.fail_after(5):
            await ended.wait()
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_takeover_slower_than_the_grace_holds_the_reports_again(
    raft: MetadataRaft,
) -> None:
    """The takeover's first entry applies after the grace ended the hold (at 10,000
    partitions on a loaded machine, up to 3.6 s after the kill; 14.8 s at load 20): the
    reports are held again while its elections apply, instead of going for the rest
    (before, a hold that had ended stayed ended while the server was gone)."""
    await create(raft, "wide", (R3,) * 3)
    gone, now = {"s1"}, [100.0]
    hold = report_hold(FollowerView(raft), gone, now)
    first = hold.ended("s1")
    assert first is not None
    now[0] = 103.1
    assert not hold.held("s1")  # the grace passed, nothing elected yet
    assert first.is_set()
    now[0] = 104.0
    assert not hold.held("s1")
    stream_id = raft.state.streams["wide"].stream_id
    assert (await raft.propose(ElectLeader("wide", 0, "s2", 1, stream_id))).result.ok
    again = hold.ended("s1")
    assert again is not None
    assert not again.is_set()
    now[0] = 105.4
    assert hold.held("s1")
    now[0] = 105.6  # 1.6 s without another election: the reports go
    assert not hold.held("s1")
    assert again.is_set()


def test_a_batch_of_reports_is_logged_with_its_count_per_leader() -> None:
    assert per_leader(["s3", "s1", "s3", None]) == "?:1,s1:1,s3:2"
