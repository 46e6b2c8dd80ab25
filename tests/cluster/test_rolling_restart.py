"""Issue 7, item 7: a rolling restart of a 3-server cluster under ack-ALL load.

Each server in turn gets SIGTERM (a graceful shutdown: it first hands the leaderships it
holds to in-sync followers) and is started again; the next one goes only once every
partition has its full ISR back. A producer (SDK, ack ALL, idempotent) publishes all the
time. Nothing acknowledged may be lost or stored twice, no send may fail, and the write
stall of each restart (the longest time without any ack, and without an ack of a partition
the stopped server led) is printed.

Takes ~40 s (three restarts of a server process, each waiting for a full ISR).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from cluster.checkers import Acked
from cluster.harness import Cluster, needs_cluster
from cluster.scenario import Scenario
from cluster.views import partition_info, wait_full_isr

pytestmark = [pytest.mark.fault, pytest.mark.anyio, needs_cluster]

PARTITIONS = 3
RATE = 1000.0
"""Messages per second offered."""
ACKED_BETWEEN_RESTARTS = 300
"""Acks to see after a restart before the next one."""
FULL_ISR_TIMEOUT_S = 30.0
"""Bound on the ISR of every partition being whole again."""
JET = [sys.executable, "-m", "jetserver.cli.main"]
STALL_BOUND_S = 10.0
"""No restart may stall writes this long (the ack timeout is :data:`ACK_TIMEOUT_S`: a lost
handoff, with requests waiting out their timeout, shows up here; the figure printed is
what counts)."""
ACK_TIMEOUT_S = 15.0
"""The producer's ack timeout here: above :data:`STALL_BOUND_S` (the other fault tests'
8 s, workload.ACK_TIMEOUT_S, would hide a lost handoff under the bound)."""


def max_gap(acked: list[Acked], start: float, end: float, partitions: set[int] | None) -> float:
    """The longest time within [start, end] without an ack (of ``partitions`` if given)."""
    times = sorted(
        a.at
        for a in acked
        if start <= a.at <= end and (partitions is None or a.partition in partitions)
    )
    edges = [start, *times, end]
    return max(b - a for a, b in itertools.pairwise(edges))


async def test_rolling_restart_under_load_loses_nothing(tmp_path: Path) -> None:
    with Cluster(root=tmp_path, size=3) as cluster:
        async with Scenario.open(cluster, "orders", partitions=PARTITIONS, rf=3) as sc:
            sc.producer.ack_timeout_s = ACK_TIMEOUT_S
            sc.start_producer(count=100_000, time_limit_s=90.0, rate=RATE)
            await sc.producer.wait_acked(ACKED_BETWEEN_RESTARTS, 30.0)
            stalls: list[float] = []
            for server in list(cluster.servers):
                led = set()
                for p in range(PARTITIONS):
                    _info, leader = await wait_full_isr(cluster, "orders", p, 3, FULL_ISR_TIMEOUT_S)
                    if leader == server.server_id:
                        led.add(p)
                t0 = time.monotonic()
                code = await anyio.to_thread.run_sync(server.stop)
                t_stopped = time.monotonic()
                await anyio.to_thread.run_sync(server.start)
                t_started = time.monotonic()
                acked = len(sc.producer.acked)
                await sc.producer.wait_acked(acked + ACKED_BETWEEN_RESTARTS, 30.0)
                t_end = time.monotonic()
                stall_any = max_gap(sc.producer.acked, t0, t_end, None)
                stall_led = max_gap(sc.producer.acked, t0, t_end, led) if led else 0.0
                stalls.append(max(stall_any, stall_led))
                moved = [
                    (p, (await partition_info(cluster, "orders", p)) or "?") for p in sorted(led)
                ]
                sc.note(
                    f"restart of {server.server_id} (exit {code}, led partitions {sorted(led)}): "
                    f"stopped in {t_stopped - t0:.2f} s, running again after "
                    f"{t_started - t0:.2f} s; write stall: {stall_any * 1000:.0f} ms without any "
                    f"ack, {stall_led * 1000:.0f} ms without an ack of a partition it led; "
                    f"now {[(p, getattr(i, 'leader', i)) for p, i in moved]}"
                )
                assert code == 0, server.log_tail()
            status = await anyio.to_thread.run_sync(jet_cluster_status, cluster.addresses)
            await sc.verify()
            sc.note(
                f"producer retries: {sc.producer.retries}; stalls {[round(s, 3) for s in stalls]}"
            )
            assert not sc.producer.failures, (sc.producer.failures, sc.producer.last_failure)
            assert max(stalls) < STALL_BOUND_S, stalls
            # `jet cluster status` once every ISR was whole again: every server answers,
            # each partition has a leader at an epoch after the handoffs and a full ISR.
            assert {s["id"]: s["up"] for s in status["servers"]} == {
                "s1": True,
                "s2": True,
                "s3": True,
            }, status
            assert status["metadata_leader"] in {"s1", "s2", "s3"}, status
            for p in status["partitions"]:
                assert p["leader"] is not None, status
                assert p["leader_epoch"] >= 1, status
                assert isinstance(p["hw"], int), status
                assert p["hw"] > 0, status


def jet_cluster_status(addresses: list[str]) -> dict[str, Any]:
    """``jet cluster status --json`` until it exits 0 (every server up, full ISRs); bounded."""
    deadline = time.monotonic() + FULL_ISR_TIMEOUT_S
    while True:
        proc = subprocess.run(
            [*JET, "cluster", "status", "--json", "--servers", ",".join(addresses)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if proc.returncode == 0 or time.monotonic() > deadline:
            assert proc.returncode == 0, proc.stdout + proc.stderr
            out: dict[str, Any] = orjson.loads(proc.stdout)
            return out
        time.sleep(0.5)  # polling another process: no event to wait on
