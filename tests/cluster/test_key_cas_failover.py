"""Issue 38 item 2: per-key compare-and-set survives a leader failover.

Three ``jet server`` processes, a compacted stream with RF=3 (min ISR 2). In every round
three racing clients send a Produce message for the same key with ack ALL and
``Jet-Expected-Key-Offset`` = the key's offset after the previous round; exactly one must
win each round. Each client is an idempotent producer (its own id, one sequence per round),
so a retry after an unknown outcome (the leader died) gets DUPLICATE_SEQUENCE if its first
try was stored, and the refusal otherwise.

- Round ``KILL_BETWEEN``: the first racer's write is acknowledged, then the leader is killed
  with SIGKILL, then the other two write (through the failover): the new leader's key index,
  rebuilt from its own log, must refuse both, naming the first racer's offset.
- Round ``KILL_DURING``: the leader is killed while the three writes are in flight.

At the end the log holds exactly one record per round, each one expecting the offset of the
round before (a chain), and each round had exactly one winner among the answers.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from cluster.harness import Cluster, needs_cluster
from cluster.views import wait_full_isr, wait_leader
from jetsdk import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode, is_retriable
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.record import iter_records
from jetsdk.errors import JetError

pytestmark = [pytest.mark.fault, pytest.mark.anyio, needs_cluster]

STREAM = "cas"
KEY = b"k"
ROUNDS = 8
RACERS = 3
KILL_BETWEEN = 2
KILL_DURING = 5
ATTEMPTS = 60
"""Tries of one write through a failover (each bounded by the request timeout)."""
BOUND_S = 30.0


class Racer:
    """One client writing as an idempotent producer (one sequence per round)."""

    def __init__(self, client: Client, index: int) -> None:
        self.client = client
        self.index = index
        self.producer_id = secrets.randbits(63)

    async def write(self, round_: int, expected: int) -> tuple[str, int]:
        """("won", offset) or ("lost", the key's offset the refusal names)."""
        value = orjson.dumps({"round": round_, "racer": self.index, "expected": expected})
        msg = ProduceMessage(
            value=value, key=KEY, headers=(("Jet-Expected-Key-Offset", str(expected).encode()),)
        )
        request = ProduceRequest(
            STREAM, 0, AckPolicy.ALL, 5000, (msg,), self.producer_id, round_, sequence_start=True
        )  # (a lost round leaves a hole in the sequences: each write starts its own)
        last: object = None
        for _ in range(ATTEMPTS):
            try:
                (result,) = await self.client.produce(request)
            except JetError as exc:
                if not exc.retriable:
                    raise
                last = exc
                await anyio.sleep(0.2)  # back off: the cluster is electing a leader
                continue
            code = result.error_code
            if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE):
                return "won", result.offset
            if code == ErrorCode.WRONG_EXPECTED_KEY_OFFSET:
                return "lost", result.offset
            if not is_retriable(code):
                raise AssertionError(f"racer {self.index}: unexpected code {code}")
            last = code
            await anyio.sleep(0.2)
        raise AssertionError(f"racer {self.index} got no answer: {last!r}")


async def read_all(client: Client) -> list[dict[str, Any]]:
    hw = (await client.list_offsets(STREAM, 0)).hw
    out: list[dict[str, Any]] = []
    offset = 0
    while offset < hw:
        _h, data = await client.fetch(STREAM, 0, offset, max_bytes=1 << 20, max_wait=1.0)
        for record in iter_records(data):
            out.append({"offset": record.offset, **orjson.loads(record.value)})
            offset = record.offset + 1
    return out


async def test_cas_rounds_through_leader_kills(tmp_path: Path) -> None:
    with Cluster(root=tmp_path, size=3) as cluster:
        async with Client(cluster.addresses, request_timeout=10.0) as client:
            await client.create_stream(STREAM, compact=True, replication_factor=3, min_isr=2)
            await wait_full_isr(cluster, STREAM, 0, 3, BOUND_S)
            racers = [Racer(client, i) for i in range(RACERS)]
            expected = -1
            winners: list[list[int]] = []

            async def kill_leader() -> None:
                before, leader = await wait_full_isr(cluster, STREAM, 0, 3, BOUND_S)
                victim = cluster.server(leader)
                victim.kill9()
                await wait_leader(
                    cluster, STREAM, 0, BOUND_S, not_on=leader, min_epoch=before.leader_epoch + 1
                )
                killed.append(victim)

            killed: list[Any] = []
            for round_ in range(ROUNDS):
                answers: list[Any] = []

                async def race(
                    r: Racer, round_: int = round_, exp: int = expected, into: list[Any] = answers
                ) -> None:
                    into.append((r.index, *await r.write(round_, exp)))

                with anyio.fail_after(4 * BOUND_S):
                    if round_ == KILL_BETWEEN:
                        await race(racers[0])
                        await kill_leader()
                        async with anyio.create_task_group() as tg:
                            for r in racers[1:]:
                                tg.start_soon(race, r)
                        # The first racer's retry is its own success, not a refusal.
                        assert await racers[0].write(round_, expected) == ("won", answers[0][2])
                    elif round_ == KILL_DURING:
                        async with anyio.create_task_group() as tg:
                            for r in racers:
                                tg.start_soon(race, r)
                            tg.start_soon(kill_leader)
                    else:
                        async with anyio.create_task_group() as tg:
                            for r in racers:
                                tg.start_soon(race, r)
                    if killed and round_ in (KILL_BETWEEN + 1, KILL_DURING + 1):
                        await anyio.to_thread.run_sync(killed.pop().start)
                won = [offset for _i, outcome, offset in answers if outcome == "won"]
                lost = [offset for _i, outcome, offset in answers if outcome == "lost"]
                assert len(won) == 1, (round_, answers)
                assert all(offset == won[0] for offset in lost), (round_, answers)
                winners.append(won)
                expected = won[0]
            records = await read_all(client)
    by_round: dict[int, list[dict[str, Any]]] = {}
    for rec in records:
        by_round.setdefault(rec["round"], []).append(rec)
    assert sorted(by_round) == list(range(ROUNDS))
    previous = -1
    for round_ in range(ROUNDS):
        (stored,) = by_round[round_]  # exactly one write stored per round
        assert stored["expected"] == previous
        assert stored["offset"] == winners[round_][0]
        previous = stored["offset"]
