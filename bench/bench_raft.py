"""Metadata Raft (jetserver.raft over PySyncObj): proposal latency and leader failover.

- apply latency: ``MetadataRaft.propose`` on the leader until the op is applied there,
  measured inside the leader's process, for a group of three processes on loopback (fsync
  on, the default, and off) and for three members in one process (one GIL for all);
- failover: kill -9 of the leader by PID -> a survivor reports leadership in a new term ->
  the first acknowledged proposal (the proposer retries on whichever node leads).

Two timing profiles: the defaults of :mod:`jetserver.raft.config` and a tighter one. There
is no baseline to divide by: JetStream's meta-group is not reachable through its client API,
so the figures are printed alone.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench.stats import pct
from raft.kit import agreed_leader, create_op, make_configs, running
from raft.procs import ProcCluster

PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "tight": {
        "heartbeat_s": 0.03,
        "election_timeout_min_s": 0.15,
        "election_timeout_max_s": 0.3,
        "connection_timeout_s": 0.5,
        "leader_fallback_s": 0.5,
    },
}
"""RaftConfig overrides per profile."""
WAIT_S = 15.0
"""Bound on every wait."""
MAX_ATTEMPTS = 500
"""Bound on proposal attempts after a kill."""


def _ms(values: list[float]) -> str:
    return (
        f"p50 {pct(values, 0.5) * 1e3:6.2f} ms  p90 {pct(values, 0.9) * 1e3:6.2f} ms  "
        f"p99 {pct(values, 0.99) * 1e3:6.2f} ms  max {max(values) * 1e3:6.2f} ms"
    )


def _propose(cluster: ProcCluster, name: str) -> tuple[dict[str, Any], float]:
    """Propose ``name`` on whichever node leads until acknowledged; (answer, ack time)."""
    for _ in range(MAX_ATTEMPTS):
        node = cluster.claimed_leader()
        if node is None:
            cluster.wait_for(lambda: cluster.claimed_leader() is not None, 0.5)
            continue
        answer = node.request({"cmd": "propose", "name": name, "op_id": name, "timeout": 1.0}, 3.0)
        if answer is not None and answer.get("ok"):
            return answer, time.monotonic()
        seen = len(cluster.history)
        cluster.wait_for(lambda s=seen: len(cluster.history) != s, 0.05)  # type: ignore[misc]
    raise RuntimeError(f"{name} not acknowledged after {MAX_ATTEMPTS} attempts")


def _latency_processes(root: Path, ops: int, options: dict[str, Any]) -> list[float]:
    with ProcCluster(make_configs(root, **options)) as cluster:
        cluster.start_all()
        if not cluster.wait_for(lambda: cluster.leader() is not None, WAIT_S):
            raise RuntimeError("no leader")
        _propose(cluster, "warmup")
        return [_propose(cluster, f"lat{i}")[0]["elapsed_s"] for i in range(ops)]


def _failover(root: Path, rounds: int, options: dict[str, Any]) -> list[tuple[float, float]]:
    results = []
    with ProcCluster(make_configs(root, **options)) as cluster:
        cluster.start_all()
        for r in range(rounds):
            if not cluster.wait_for(lambda: cluster.leader() is not None, WAIT_S):
                raise RuntimeError("no leader")
            victim = cluster.leader()
            assert victim is not None
            assert victim.status is not None
            term = victim.status["term"]
            answer, _ = _propose(cluster, f"before{r}")
            killed = time.monotonic()
            victim.kill()

            def elected(old: int = term) -> bool:
                node = cluster.claimed_leader()
                return node is not None and node.status is not None and node.status["term"] > old

            if not cluster.wait_for(elected, WAIT_S):
                raise RuntimeError("no new leader")
            elected_s = time.monotonic() - killed
            answer, acked = _propose(cluster, f"after{r}")
            results.append((elected_s, acked - killed))
            victim.start()
            caught_up = victim.request(
                {"cmd": "wait_applied", "index": answer["index"], "timeout": WAIT_S}, WAIT_S + 2
            )
            if not caught_up or not caught_up.get("ok"):
                raise RuntimeError(f"{victim.server_id} did not catch up: {caught_up}")
    return results


async def _latency_in_process(root: Path, ops: int) -> list[float]:
    async with running(make_configs(root)) as nodes:
        leader = await agreed_leader(nodes)
        await leader.propose(create_op("warmup"))
        samples = []
        for i in range(ops):
            started = time.perf_counter()
            await leader.propose(create_op(f"lat{i}"))
            samples.append(time.perf_counter() - started)
        return samples


def run(quick: bool) -> None:
    ops = 50 if quick else 300
    rounds = 3 if quick else 10
    with tempfile.TemporaryDirectory(prefix="bench-raft-") as tmp:
        root = Path(tmp)
        print(f"apply latency, {ops} sequential proposals on the leader (3 members):")
        cases = [
            ("3 processes, fsync", "default", {}),
            ("3 processes, no fsync", "default", {"fsync": False}),
            ("3 processes, fsync, tight", "tight", {}),
        ]
        for i, (label, profile, extra) in enumerate(cases):
            samples = _latency_processes(root / f"lat{i}", ops, {**PROFILES[profile], **extra})
            print(f"  {label:<28} {_ms(samples)}")
        samples = anyio.run(_latency_in_process, root / "inproc", ops)
        print(f"  {'1 process (shared GIL)':<28} {_ms(samples)}")
        print(f"leader failover after kill -9, {rounds} rounds (3 processes):")
        for profile, options in PROFILES.items():
            results = _failover(root / f"fail-{profile}", rounds, options)
            elected = [e for e, _ in results]
            acked = [a for _, a in results]
            print(
                f"  {profile:<8} new leader: median {statistics.median(elected) * 1e3:4.0f} ms "
                f"max {max(elected) * 1e3:4.0f} ms | first ack: median "
                f"{statistics.median(acked) * 1e3:4.0f} ms max {max(acked) * 1e3:4.0f} ms"
            )
