"""A full disk on every server of a cluster can be freed through jet (issue 31, case 7).

Each of the three servers keeps its data directory on a tmpfs of its own (mounted by the
test; needs root, skipped otherwise). Once RF 3 streams exist, a file outside jet's control
takes every byte left on all three disks: the metadata Raft must still append each
DeleteStream on every server (a journal write that finds no room releases the server's
space reserve), every delete must be answered promptly, and once the filler files are gone
every server allocates its reserve again and a new stream can be created, without a
restart.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster, wait_until_async
from cluster.scenario import Scenario
from cluster.views import wait_full_isr, wait_info
from jetserver.storage.space import RESERVE_FILE
from support.raw_client import RawClient
from support.tmpfs import fill_rest, free_bytes, mount_tmpfs, unmount

pytestmark = [pytest.mark.anyio, needs_cluster]

SERVERS = ("s1", "s2", "s3")
DISK = "8m"
DELETE_BOUND_S = 15.0
"""A DeleteStream on full disks, forwarded to the metadata leader, answered within this."""
BOUND_S = 30.0
DOOMED = tuple(f"doomed{i}" for i in range(16))
"""Streams deleted on the full disks: enough journal entries (a few hundred bytes each) to
fill the journal file's last page, which a tmpfs does not count as used space."""
RELEASED = "released the space reserve for a metadata write"
FILL_ROUNDS = 3
"""Fills of the three disks until none has a byte left (each reserve is released once)."""


async def stream_names(address: str) -> set[str]:
    async with await RawClient.connect(address) as c:
        answer = await c.metadata()
    return {s["name"] for s in answer["streams"]}


async def wait_applied(addresses: list[str], name: str) -> None:
    """Until no server lists ``name`` (bounded)."""
    for address in addresses:

        async def gone(address: str = address) -> bool:
            return name not in await stream_names(address)

        await wait_until_async(gone, BOUND_S, f"delete of {name} applied at {address}")


async def test_delete_on_full_disks_cluster_wide(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    disks = [root / sid / "data" for sid in SERVERS]
    mounted: list[Path] = []
    try:
        for disk in disks:
            mount_tmpfs(disk, DISK)
            mounted.append(disk)
        with Cluster(root=root, size=3) as cluster:
            async with await RawClient.connect(cluster.addresses[0]) as c:
                for name in (*DOOMED, "keep"):
                    await c.create_stream(name=name, subject=name, replication_factor=3)
                reserves = [disk / RESERVE_FILE for disk in disks]
                assert all(r.exists() for r in reserves)
                # A metadata write (an ISR change, a leadership round) that finds the disk
                # just filled releases that server's reserve: fill again what it freed.
                for _ in range(FILL_ROUNDS):
                    for disk in disks:
                        fill_rest(disk / "filler")
                    if [free_bytes(d) for d in disks] == [0, 0, 0]:
                        break
                assert [free_bytes(d) for d in disks] == [0, 0, 0]

                # One after the other, each answered promptly. Each delete frees its stream's
                # files; the filler takes that space again on every server that has not
                # needed its reserve yet (something else keeps filling the disk), so that
                # journal appends run out of room, past the slack of the file's last page.
                for name in DOOMED:
                    with anyio.fail_after(DELETE_BOUND_S):
                        await c.delete_stream(name)
                    await wait_applied(cluster.addresses, name)
                    logs = cluster.all_logs()
                    for sid, disk in zip(SERVERS, disks, strict=True):
                        if RELEASED not in logs[sid]:
                            fill_rest(disk / "filler")
                for address in cluster.addresses:
                    assert await stream_names(address) == {"keep"}, address
                logs = cluster.all_logs()
                released = [sid for sid in SERVERS if RELEASED in logs[sid]]
                assert len(released) >= 2, released  # at least a majority needed room

                # Space comes back: every reserve is allocated again, and a metadata change
                # that needs new space works, without a restart.
                for disk in disks:
                    os.unlink(disk / "filler")
                await wait_until_async(
                    lambda: all(r.exists() for r in reserves), BOUND_S, "reserves allocated"
                )
                with anyio.fail_after(BOUND_S):
                    await c.create_stream(name="again", subject="again", replication_factor=3)
    finally:
        for disk in reversed(mounted):
            unmount(disk)


LEFT_FREE = 100 * 1024
"""Bytes left on the follower's disk: below its floor (5 % of 8 MiB, 419 KB), above zero."""
LAG_S = 2.0
"""``[replication] replica_lag_max_s``: a follower that stopped copying leaves the ISR."""


async def test_a_follower_below_its_floor_stops_copying_and_catches_up(tmp_path: Path) -> None:
    """A follower whose disk falls below its floor refuses its copies (the floor guards
    ``append_raw`` too), so it never fills its disk, which its metadata writes may need;
    it leaves the ISR while the leader and the other follower go on acking; once space is
    back it catches up and rejoins, and nothing acknowledged is lost (Scenario.verify).

    On the code before the floor, the follower copied until its disk had no byte left."""
    root = tmp_path / "cluster"
    disks = {sid: root / sid / "data" for sid in SERVERS}
    mounted: list[Path] = []
    settings = {"replication": {"replica_lag_max_s": LAG_S}}
    try:
        for disk in disks.values():
            mount_tmpfs(disk, DISK)
            mounted.append(disk)
        with Cluster(root=root, size=3, settings=settings) as cluster:
            async with Scenario.open(cluster, "orders", partitions=1, rf=3) as sc:
                sc.start_producer(count=100_000, time_limit_s=90.0, rate=200.0)
                await sc.producer.wait_acked(100, BOUND_S)
                info, leader = await wait_full_isr(cluster, "orders", 0, 3, BOUND_S)
                follower = next(r for r in info.replicas if r != leader)
                disk = disks[follower]
                filler = disk / "filler"
                with filler.open("wb") as f:
                    f.write(b"f" * (free_bytes(disk) - LEFT_FREE))

                await wait_info(
                    cluster,
                    "orders",
                    0,
                    lambda i: follower not in i.isr and len(i.isr) == 2,
                    BOUND_S,
                    f"{follower} out of the ISR",
                )
                acked = len(sc.producer.acked)
                await sc.producer.wait_acked(acked + 200, BOUND_S)  # acks go on without it
                assert free_bytes(disk) > LEFT_FREE // 2, free_bytes(disk)

                os.unlink(filler)
                await wait_full_isr(cluster, "orders", 0, 3, BOUND_S)
                await sc.producer.wait_acked(len(sc.producer.acked) + 100, BOUND_S)
                sc.note(f"follower {follower} refused copies below its floor and rejoined")
                await sc.verify()
    finally:
        for disk in reversed(mounted):
            unmount(disk)
