"""Issue 31, item 5 (case 8): a graceful stop just after another server's kill -9.

Five servers (the metadata Raft keeps a majority of three after one kill and one stop),
one RF 3 stream. Server A is killed with SIGKILL; well under half a second later server
B, which leads a partition whose next in-sync replica (in replica order) is A, gets
SIGTERM and hands its leaderships over. The rule (spec/cluster.md, "Graceful shutdown"):
a stopping server hands a leadership only to an ISR member that answered its liveness
probes within the bound, so none goes to A.

Checked: no partition is led by A at any epoch after the kill (every survivor's
metadata polled every 50 ms from the kill until B exited, and the survivors' "assignment
applied" log lines), every partition with two surviving replicas then takes ack-ALL
produces on the three survivors (one with a single surviving replica refuses them:
NOT_ENOUGH_REPLICAS, min_isr 2), and no server logged a traceback, the harness's own
teardown included.

Before the fix B elected A for that partition (its handoff chose the first other ISR
member whatever the liveness view said): the partition sat with a dead leader until the
followers' silent-leader reports moved it again.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import partition_info, wait_full_isr, wait_leader
from cluster.workload import client
from jetsdk import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetserver.testing import metadata_request

pytestmark = [pytest.mark.fault, pytest.mark.anyio, needs_cluster]

SIZE = 5
PARTITIONS = 10
BOUND_S = 45.0
"""Bound on every wait for leaders, ISRs and the stop."""
STOP_AFTER_KILL_S = 0.4
"""The issue's gap between the kill and the SIGTERM."""
WATCH_AFTER_STOP_S = 2.0
"""How long the metadata is still watched after B exited."""
PRODUCE_TIMEOUT_MS = 20_000
"""Server-side bound on one ack-ALL produce (above the lag bound that drops A)."""
MAX_PRODUCES = 100
"""Bound on the produces of one partition in :func:`produce_until`."""
RETRY_S = 0.2
"""Pause between two of them."""
TRACEBACK = re.compile(r"Traceback|RuntimeError")


async def test_a_graceful_stop_hands_no_leadership_to_a_server_killed_just_before(
    tmp_path: Path,
) -> None:
    settings = {"replication": {"replica_lag_max_s": 4.0}}
    # DEBUG: each replica's "assignment applied" line (INFO has one line per burst).
    with Cluster(
        root=tmp_path / "cluster", size=SIZE, settings=settings, log_level="DEBUG"
    ) as cluster:
        async with client(cluster.addresses) as jet:
            await jet.create_stream("orders", partitions=PARTITIONS, replication_factor=3)
            infos = {}
            for p in range(PARTITIONS):
                infos[p], _leader = await wait_full_isr(cluster, "orders", p, 3, BOUND_S)
            meta_leader = metadata_request(cluster.addresses[0], 5.0).get("metadata_leader")
            pairs = [
                (info.leader, next(r for r in info.replicas if r != info.leader), p)
                for p, info in infos.items()
            ]
            # B leads a partition whose next ISR member in replica order is A; neither
            # leads the metadata Raft (its election would only slow the handoff down).
            b_id, a_id, p_ab = next((b, a, p) for b, a, p in pairs if meta_leader not in (a, b))
            a, b = cluster.server(a_id), cluster.server(b_id)
            epochs_at_kill = {p: info.leader_epoch for p, info in infos.items()}
            seen_on_a: set[tuple[int, int]] = set()
            b_exited = anyio.Event()

            async def watch() -> None:
                """Every survivor's view of every partition, every 50 ms, until shortly
                after B exited: record any leadership of A after the kill."""
                deadline: float | None = None
                while deadline is None or time.monotonic() < deadline:
                    for p in range(PARTITIONS):
                        info = await partition_info(cluster, "orders", p, exclude=(a_id,))
                        if (
                            info is not None
                            and info.leader == a_id
                            and info.leader_epoch > epochs_at_kill[p]
                        ):
                            seen_on_a.add((p, info.leader_epoch))
                    if deadline is None and b_exited.is_set():
                        deadline = time.monotonic() + WATCH_AFTER_STOP_S
                    await anyio.sleep(0.05)

            assert b.proc is not None
            async with anyio.create_task_group() as tg:
                a.kill9()
                killed = time.monotonic()
                await anyio.sleep(max(0.0, STOP_AFTER_KILL_S - (time.monotonic() - killed)))
                b.proc.send_signal(signal.SIGTERM)
                gap_s = time.monotonic() - killed
                tg.start_soon(watch)
                # One SIGTERM only: a second one makes the server cancel its graceful stop.
                code = await anyio.to_thread.run_sync(b.proc.wait, BOUND_S)
                b_exited.set()
            print(
                f"killed {a_id}, SIGTERM to {b_id} {gap_s:.3f} s later (it led "
                f"orders/{p_ab} with {a_id} next in its ISR); {b_id} exited with {code}"
            )
            assert gap_s < 0.5, f"the SIGTERM went {gap_s:.3f} s after the kill (preempted)"
            assert code == 0, b.log_tail()
            assert not seen_on_a, f"leaderships handed to the killed {a_id}: {seen_on_a}"
            logs = cluster.all_logs()
            for sid, text in logs.items():
                if sid == a_id:
                    continue
                for line in text.splitlines():
                    if "assignment applied" in line and f" leader={a_id} " in line:
                        epoch = int(line.split(" leader_epoch=")[1].split()[0])
                        assert epoch <= epochs_at_kill[int(_field(line, "partition"))], line
            # The three survivors take ack-ALL produces on every partition that kept two
            # replicas (min_isr 2, the default at RF 3); one left with a single replica
            # refuses them with NOT_ENOUGH_REPLICAS, not a timeout.
            for p in range(PARTITIONS):
                survivors = set(infos[p].replicas) - {a_id, b_id}
                expected = ErrorCode.NONE if len(survivors) >= 2 else ErrorCode.NOT_ENOUGH_REPLICAS
                await wait_leader(cluster, "orders", p, BOUND_S, not_on=a_id)
                codes = await produce_until(jet, p, expected)
                assert codes[-1] == expected, (p, survivors, codes)
    # After the harness stopped every server too (its teardown is part of the check).
    logs = cluster.all_logs()
    found = {sid: TRACEBACK.findall(text) for sid, text in logs.items()}
    assert not any(found.values()), {
        sid: _around(logs[sid], TRACEBACK) for sid, hits in found.items() if hits
    }


async def produce_until(jet: Client, partition: int, expected: ErrorCode) -> list[int]:
    """Ack-ALL produces to ``partition`` until one is answered ``expected`` (bounded by
    BOUND_S in all, at most MAX_PRODUCES); every answer's code. An ISR still settling
    (a live follower dropped for lag on a loaded machine, added back once it fetches)
    answers NOT_ENOUGH_REPLICAS for a moment."""
    codes: list[int] = []
    with anyio.fail_after(BOUND_S):
        for _ in range(MAX_PRODUCES):
            results = await jet.produce(
                ProduceRequest(
                    stream="orders",
                    partition=partition,
                    ack_policy=AckPolicy.ALL,
                    timeout_ms=PRODUCE_TIMEOUT_MS,
                    messages=(ProduceMessage(b"after-%d" % partition),),
                )
            )
            codes.extend(r.error_code for r in results)
            if codes[-1] == expected:
                break
            await anyio.sleep(RETRY_S)
    return codes


def _field(line: str, name: str) -> str:
    return line.split(f" {name}=")[1].split()[0]


def _around(text: str, pattern: re.Pattern[str], chars: int = 1500) -> str:
    """The log text around the first match of ``pattern``."""
    match = pattern.search(text)
    if match is None:
        return ""
    return text[max(0, match.start() - chars) : match.end() + chars]
