"""Metadata leader failure on a real 3-server cluster: kill -9 by PID, Raft elects a new
leader, stream operations continue, a create interrupted by the kill completes or fails
cleanly (never half-created), and a partition leader killed is replaced from the ISR once
followers report it silent (ReportLeader, as the replicas do).

Every wait is bounded; every loop is bounded in count and time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import anyio
import pytest

from jetsdk import AckPolicy, Client, Producer
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetserver.testing.devcluster import DevCluster
from support.raw_client import ConnectionClosed, RawClient, ServerError

from .control_kit import assignments, call, dev_cluster, eventually, metadata, metadata_leader

KILL_DELAYS_S = (0.0, 0.3)
"""One round of "kill the metadata leader during a create" per delay between sending the
create and the kill (the first lands before the entry commits, the second usually after it
committed, while the leader waits for the partition leaders to open their replicas)."""
PARTITIONS = 24
"""Partitions of the streams created while the leader is killed (one op holds them all)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """One cluster for the module: every test restarts the servers it killed."""
    with dev_cluster(tmp_path_factory.mktemp("failover")) as dev:
        yield dev


@pytest.fixture(autouse=True)
def every_server_back(cluster: DevCluster) -> Iterator[None]:
    """Restart whatever a test left dead (a failed assertion before its own restart), so
    that one failure does not fail the module's later tests for want of a server."""
    yield
    for p in cluster.servers:
        if not p.alive:
            cluster.start_server(p.server_id)


def live(cluster: DevCluster) -> list[str]:
    return [p.address for p in cluster.servers if p.alive]


async def stream_everywhere(cluster: DevCluster, name: str) -> list[Any] | None:
    """The stream's assignments if every live server agrees on them (None otherwise)."""
    seen = [assignments(await metadata(a), name) for a in live(cluster)]
    return seen[0] if all(s == seen[0] for s in seen) else None


@pytest.mark.anyio
async def test_metadata_leader_killed_then_operations_continue(cluster: DevCluster) -> None:
    old = await metadata_leader(cluster)
    # An SDK client bootstrapped from the server about to die.
    first = cluster.server(old).address
    others = [a for a in cluster.addresses if a != first]
    async with Client([first, *others]) as client:
        await client.create_stream("before", partitions=3, replication_factor=3)
        assert client.server_info["server_id"] == old
        killed_at = time.monotonic()
        cluster.kill(old)
        new = await metadata_leader(cluster, exclude=old)
        elected_s = time.monotonic() - killed_at
        assert new != old
        # Admin calls move to a live server by themselves. Placement leaves out the servers
        # that the metadata leader's probes found down, which takes up to a probe period
        # after the kill (as a broker's session in Kafka): ask again until it does.
        with anyio.fail_after(30):
            while True:
                info = await client.create_stream("sdk-after", replication_factor=2)
                if old not in info.partitions[0].replicas:
                    break
                await client.delete_stream("sdk-after")
                await anyio.sleep(0.2)
        assert "sdk-after" in [i.name for i in await client.list_streams()]
        await client.delete_stream("sdk-after")
    survivors = [p for p in cluster.servers if p.alive]
    # Stream operations continue, through the new leader and through its follower.
    for p in survivors:
        name = f"after-{p.server_id}"
        spec: dict[str, Any] = {"name": name, "subject": name, "partitions": 2}
        spec["replication_factor"] = 2
        answer = await call(p.address, partial(RawClient.create_stream, **spec))
        assert answer["created"] is True
        assert {r for part in answer["stream"]["partitions"] for r in part["replicas"]} <= {
            q.server_id for q in survivors
        }
    # RF 3 needs the dead server: refused while it does not answer.
    with pytest.raises(ServerError) as info:
        await call(
            survivors[0].address,
            lambda c: c.create_stream(name="rf3", subject="rf3", replication_factor=3),
        )
    assert info.value.code == ErrorCode.INVALID_ARGUMENT
    await call(survivors[1].address, lambda c: c.delete_stream("before"))
    # The killed server restarts on its data, catches up and registers again.
    await anyio.to_thread.run_sync(cluster.start_server, old)
    restarted = cluster.server(old)

    async def caught_up() -> bool | None:
        answer = await metadata(restarted.address)
        names = {s["name"] for s in answer["streams"]}
        ok = {"after-" + p.server_id for p in survivors} <= names and "before" not in names
        return True if ok and answer["metadata_leader"] == new else None

    await eventually(caught_up, "the restarted server has the streams created without it")

    async def data_removed() -> bool | None:
        root = restarted.data_dir / "streams"
        return None if any(d.name.startswith("before") for d in root.iterdir()) else True

    await eventually(data_removed, "the restarted server removed the deleted stream's data")
    print(f"metadata leader kill -9 -> new leader agreed by all: {elected_s:.3f} s")


async def send_create(address: str, body: dict[str, Any]) -> dict[str, Any] | ServerError | str:
    """One CreateStream; the answer, the error frame, or why no answer came."""
    try:
        with anyio.fail_after(20):
            async with await RawClient.connect(address) as c:
                return await c.call_json(Api.CREATE_STREAM, body, timeout_s=20)
    except ServerError as exc:
        return exc
    except (OSError, TimeoutError, ConnectionClosed, anyio.BrokenResourceError) as exc:
        return f"no answer: {exc!r}"


@pytest.mark.anyio
async def test_metadata_leader_killed_during_create(cluster: DevCluster) -> None:
    outcomes = []
    for round_, delay in enumerate(KILL_DELAYS_S):
        leader = await metadata_leader(cluster)
        name = f"interrupted-{round_}"
        op_id = uuid.uuid4().hex
        body = {
            "name": name,
            "subject": name,
            "partitions": PARTITIONS,
            "replication_factor": 2,
            "op_id": op_id,
        }
        target = cluster.server(leader).address
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def create(
                out: list[Any] = result, b: dict[str, Any] = body, to: str = target
            ) -> None:
                out.append(await send_create(to, b))

            tg.start_soon(create)
            await anyio.sleep(delay)
            cluster.kill(leader)
        first = result[0]
        # Whatever the first answer was, the stream now exists whole or not at all ...
        await metadata_leader(cluster, exclude=leader)
        seen = await eventually(
            partial(stream_everywhere, cluster, name), "survivors agree on the stream"
        )
        assert len(seen) in (0, PARTITIONS), seen
        # ... and a retry with the same op id on a survivor completes it exactly once.
        survivor = next(p for p in cluster.servers if p.alive)
        retried = await send_create(survivor.address, body)
        assert isinstance(retried, dict), retried
        assert len(retried["stream"]["partitions"]) == PARTITIONS
        if isinstance(first, dict):
            assert first["created"] is True
            assert retried == first  # the remembered outcome of the same op id
        assert retried["created"] is True  # exactly once: the retry is that same creation
        done = await eventually(
            partial(stream_everywhere, cluster, name), "survivors agree on the stream"
        )
        assert len(done) == PARTITIONS
        outcomes.append(
            f"{'answered' if isinstance(first, dict) else 'interrupted'}, "
            f"{'applied' if seen else 'not applied'} before the kill"
        )
        await anyio.to_thread.run_sync(cluster.start_server, leader)
    print(f"interrupted creates: {outcomes}")


async def leader_everywhere(cluster: DevCluster, name: str, partition: int) -> tuple[str, int]:
    """The partition's (leader, epoch) once every live server agrees on it (else ("", -1))."""
    seen = set()
    for address in live(cluster):
        leader, _replicas, epoch = assignments(await metadata(address), name)[partition]
        seen.add((leader, epoch))
    return seen.pop() if len(seen) == 1 else ("", -1)


@pytest.mark.anyio
async def test_reports_from_a_majority_of_the_isr_move_the_leadership(cluster: DevCluster) -> None:
    """ReportLeader (api 9) end to end, no kill: two of three ISR members report the leader
    silent; the metadata leader elects one of the reporters at epoch 1; the old leader turns
    follower and the SDK follows the new one."""
    meta_leader = await metadata_leader(cluster)
    spec: dict[str, Any] = {"name": "rep", "subject": "rep", "replication_factor": 3}
    answer = await call(cluster.servers[0].address, partial(RawClient.create_stream, **spec))
    part = answer["stream"]["partitions"][0]
    old = part["leader"]
    reporters = [r for r in part["replicas"] if r != old]
    address = cluster.server(meta_leader).address
    base = {"stream": "rep", "partition": 0, "leader_epoch": 0}
    answers = [
        await call(
            address,
            partial(RawClient.call_json, api=Api.REPORT_LEADER, body={**base, "reporter": r}),
        )
        for r in reporters
    ]
    # The first report alone is not a majority; the second completes it (on a loaded
    # machine a replica's own report may have joined the first one already).
    assert answers[0]["leader"] in (old, *reporters)
    new = answers[1]["leader"]
    assert new in reporters
    assert answers[1]["leader_epoch"] == 1

    async def moved() -> tuple[str, int] | None:
        got = await leader_everywhere(cluster, "rep", 0)
        return got if got == (new, 1) else None

    await eventually(moved, "every server knows the new leader")

    async def serving() -> bool | None:
        got = await call(cluster.server(new).address, partial(RawClient.list_offsets, stream="rep"))
        return True if got["offset"] == 0 else None

    await eventually(serving, "the new leader serves")
    with pytest.raises(ServerError) as info:
        await call(cluster.server(old).address, partial(RawClient.list_offsets, stream="rep"))
    assert info.value.code == ErrorCode.NOT_LEADER
    async with Client([cluster.server(old).address]) as client:
        assert (await client.list_offsets("rep")).offset == 0


@pytest.mark.anyio
@pytest.mark.parametrize("metadata_leader_too", [False, True])
async def test_partition_leader_killed_is_replaced_by_the_followers_reports(
    cluster: DevCluster, metadata_leader_too: bool
) -> None:
    """kill -9 of a partition leader (also the metadata leader in the second case): the
    followers' own silent-leader reports elect a new leader from the ISR; timed."""
    meta_leader = await metadata_leader(cluster)
    name = f"auto-{int(metadata_leader_too)}"
    spec: dict[str, Any] = {"name": name, "subject": name, "partitions": 3}
    spec["replication_factor"] = 3
    answer = await call(cluster.servers[0].address, partial(RawClient.create_stream, **spec))
    parts = answer["stream"]["partitions"]
    part = next(p for p in parts if (p["leader"] == meta_leader) == metadata_leader_too)
    victim, partition = part["leader"], part["partition"]

    async def replicas_open() -> bool | None:  # every replica opened its log: they fetch
        opened = [
            any((d / str(partition)).is_dir() for d in (s.data_dir / "streams").glob(f"{name}-*"))
            for s in cluster.servers
            if s.server_id in part["replicas"]
        ]
        return True if len(opened) == 3 and all(opened) else None

    await eventually(replicas_open, "every replica's log open")
    killed_at = time.monotonic()
    cluster.kill(victim)

    async def elected() -> tuple[str, int] | None:
        got = await leader_everywhere(cluster, name, partition)
        return got if got[0] not in ("", victim) else None

    new, epoch = await eventually(elected, "a new partition leader", timeout_s=20)
    failover_s = time.monotonic() - killed_at
    assert epoch == 1
    assert new in part["isr"]

    async def serving() -> bool | None:
        got = await call(
            cluster.server(new).address,
            partial(RawClient.list_offsets, stream=name, partition=partition),
        )
        return True if got["offset"] >= 0 else None

    await eventually(serving, "the new leader answers for the partition")
    served_s = time.monotonic() - killed_at
    print(
        f"partition leader kill -9 (metadata leader too: {metadata_leader_too}) -> "
        f"new leader in every survivor's metadata {failover_s:.3f} s, serving {served_s:.3f} s"
    )
    await anyio.to_thread.run_sync(cluster.start_server, victim)


SPREAD_PARTITIONS = 12
"""Partitions of the stream whose leader is killed (RF 3: the victim leads 4)."""


SPREAD_TRIES = 3
"""Kills tried until a dead server's partitions land on both survivors: the takeover elects
only survivors that answered one of their last two liveness probes (a paused or overloaded
member is not elected), and on a loaded machine two probes of one survivor in a row can
time out at the kill, which rightly gives that kill's partitions to the other. The old
choice ("the first reporter in replica order") gave them all to one survivor on every
try."""


@pytest.mark.anyio
async def test_a_dead_servers_partitions_are_spread_over_both_survivors(
    cluster: DevCluster,
) -> None:
    """Issue 34: every partition a server leads has the same follower order, and the new
    leader was the first reporter in replica order (or the metadata leader, whose own
    reports arrive first): one survivor took all of the killed server's leaderships and
    made every role change of the failover. The metadata leader now collects both
    survivors' reports and takes them in turn by partition number."""
    tries: list[tuple[list[int], list[str]]] = []
    for _ in range(SPREAD_TRIES):
        led, leaders, survivors = await kill_a_partition_leader(cluster)
        tries.append((led, leaders))
        if set(leaders) == survivors:
            return
    raise AssertionError(f"never spread over {sorted(survivors)}: {tries}")


async def kill_a_partition_leader(cluster: DevCluster) -> tuple[list[int], list[str], set[str]]:
    """Create an RF 3 stream, kill a partition leader other than the metadata leader, and
    restart it once its partitions have new leaders: (the partitions it led, their new
    leaders, the survivors)."""
    meta_leader = await metadata_leader(cluster)
    name = f"spread-{uuid.uuid4().hex[:6]}"
    spec: dict[str, Any] = {"name": name, "subject": name, "partitions": SPREAD_PARTITIONS}
    spec["replication_factor"] = 3
    answer = await call(cluster.servers[0].address, partial(RawClient.create_stream, **spec))
    parts = answer["stream"]["partitions"]
    victim = next(p["leader"] for p in parts if p["leader"] != meta_leader)
    led = [p["partition"] for p in parts if p["leader"] == victim]
    assert len(led) >= 2, parts

    async def replicas_open() -> bool | None:  # every replica opened its logs: they fetch
        dirs = [list((s.data_dir / "streams").glob(f"{name}-*")) for s in cluster.servers]
        opened = [
            sum(1 for d in found for p in range(SPREAD_PARTITIONS) if (d / str(p)).is_dir())
            for found in dirs
        ]
        return True if opened == [SPREAD_PARTITIONS] * 3 else None

    await eventually(replicas_open, "every replica's log open")
    cluster.kill(victim)

    async def moved() -> list[str] | None:
        got = await stream_everywhere(cluster, name)
        if not got:
            return None
        leaders = [got[p][0] for p in led]
        return leaders if all(lead not in ("", None, victim) for lead in leaders) else None

    leaders = await eventually(moved, f"{victim}'s partitions led by survivors", timeout_s=30)
    survivors = {p.server_id for p in cluster.servers if p.server_id != victim}
    await anyio.to_thread.run_sync(cluster.start_server, victim)
    return led, leaders, survivors


@pytest.mark.anyio
async def test_clean_stop_marker(cluster: DevCluster) -> None:
    """A clean stop leaves ``clean_stop`` (the next registration keeps the server's ISR
    places); a start removes it, so a crash of that run is seen as one."""
    p = cluster.servers[-1]
    marker = p.data_dir / "clean_stop"
    assert not marker.exists()
    await anyio.to_thread.run_sync(cluster.stop_server, p.server_id)
    assert marker.exists()
    await anyio.to_thread.run_sync(cluster.start_server, p.server_id)
    assert not marker.exists()
    cluster.kill(p.server_id)
    assert not marker.exists()
    await anyio.to_thread.run_sync(cluster.start_server, p.server_id)


IDLE_S = 6.5
"""Four silence bounds (leader_silence_s 1.5 s), and past one idle long poll (5 s)."""


@pytest.mark.anyio
async def test_idle_partitions_keep_their_leaders(cluster: DevCluster) -> None:
    """An idle partition's replica fetch answers only once per ``fetch_max_wait_s`` (5 s),
    far past ``leader_silence_s`` (1.5 s): the followers count the leader's server answering
    their servers' liveness probes as hearing from it, so nobody reports the leader silent
    and no partition changes leader (spec/cluster.md, "Silent leaders")."""
    name = f"idle-{uuid.uuid4().hex[:6]}"
    spec: dict[str, Any] = {"name": name, "subject": name, "partitions": 6}
    spec["replication_factor"] = 3
    await call(cluster.servers[0].address, partial(RawClient.create_stream, **spec))
    address = cluster.servers[0].address
    before = assignments(await metadata(address), name)
    assert all(epoch == 0 for _leader, _replicas, epoch in before)
    await anyio.sleep(IDLE_S)  # the span observed: no event marks "nothing happened"
    after = assignments(await metadata(address), name)
    assert after == before


PAUSE_S = 2.0
"""Longer than leader_silence_s (1.5 s) and a probe's bound (1 s), shorter than DOWN_AFTER_S
(3 s): a server this busy is slow, not dead."""


@pytest.mark.anyio
async def test_a_briefly_stalled_leader_keeps_its_leaderships(cluster: DevCluster) -> None:
    """A partition leader's server that stops answering for PAUSE_S (SIGSTOP: an event loop
    busy for that long) is not reported by its followers nor taken for down by the metadata
    leader: its partitions keep their leader and epoch. (It was: every partition it led
    moved, and at thousands of partitions the moves overloaded the others in turn.)"""
    meta_leader = await metadata_leader(cluster)
    name = f"stall-{uuid.uuid4().hex[:6]}"
    spec: dict[str, Any] = {"name": name, "subject": name, "partitions": 6}
    spec["replication_factor"] = 3
    await call(cluster.servers[0].address, partial(RawClient.create_stream, **spec))
    address = cluster.server(meta_leader).address
    before = assignments(await metadata(address), name)
    victim = next(leader for leader, _r, _e in before if leader != meta_leader)
    cluster.server(victim).pause()
    try:
        await anyio.sleep(PAUSE_S)  # the span observed: no event marks "nothing happened"
    finally:
        cluster.server(victim).resume()
    await settled(cluster, name, spec["partitions"])
    after = assignments(await metadata(address), name)
    assert after == before


SETTLE_BOUND_S = 30.0
"""Bound on :func:`settled`."""


async def settled(cluster: DevCluster, stream: str, partitions: int) -> None:
    """Wait until what a pause set going has landed: every partition of ``stream`` takes an
    ALL-acked record (its followers fetched from its leader after the pause, so they hear
    from it and report nothing more), then a metadata write commits through the metadata
    leader, after any election that a report made during the pause proposed (the Raft log
    keeps their order)."""
    barrier = f"barrier-{uuid.uuid4().hex[:6]}"
    with anyio.fail_after(SETTLE_BOUND_S):
        async with Client(cluster.addresses) as client:
            async with Producer(client, stream, ack=AckPolicy.ALL) as producer:
                for partition in range(partitions):
                    await producer.send(b"after the pause", partition=partition)
            await client.create_stream(barrier, barrier)
            await client.delete_stream(barrier)
