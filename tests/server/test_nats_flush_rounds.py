"""Flushes of the NATS link that wait at the same time share PING round trips
(:mod:`jetserver.natslink.shared_rounds`).

A failover's thousand new partition leaders each subscribe and confirm the subscription
with a flush; each flush was a PING round trip of its own (0.9 s on average of the role
change at 3,000 partitions). Here a real nats-server and a real link:

- 200 subscriptions confirmed at once take a few PINGs, not 200, and every one of them
  receives what is published once its flush returned (the confirmation still holds);
- a flush asked while a round trip is under way waits for the next one (the running one
  may have been sent before its subscription), shown on :class:`SharedRounds` itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from jetserver.natslink.link import NatsLink
from jetserver.natslink.shared_rounds import SharedRounds
from jetserver.testing import in_process_config
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

BOUND_S = 10.0
"""Bound on every wait."""
SUBSCRIPTIONS = 200
MOST_PINGS = 5
"""A handful of rounds: one running when the first asks, then one for everyone else."""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_flushes_at_the_same_time_share_pings_and_still_confirm(
    nats_server: NatsServer,
) -> None:
    link = NatsLink(in_process_config(nats_server.url, Path("/nonexistent")).nats)
    await link.connect()
    try:
        nc: Any = link._ingest_client()
        pings = 0
        send_ping = nc._send_ping

        async def counted(future: asyncio.Future[bool] | None = None) -> None:
            nonlocal pings
            pings += 1
            await send_ping(future)

        nc._send_ping = counted  # the real PING, counted
        got: set[int] = set()
        all_got = anyio.Event()
        owners = [object() for _ in range(SUBSCRIPTIONS)]

        def handler_of(i: int) -> Any:
            async def handler(_msg: Any) -> None:
                got.add(i)
                if len(got) == SUBSCRIPTIONS:
                    all_got.set()

            return handler

        async def subscribe_and_confirm(i: int) -> None:
            await link.subscribe(f"rounds.{i}", handler_of(i), ingest_owner=owners[i])
            await link.flush(BOUND_S, ingest=True)
            await link.publish(f"rounds.{i}", b"x")  # on the main connection

        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                for i in range(SUBSCRIPTIONS):
                    tg.start_soon(subscribe_and_confirm, i)
            await all_got.wait()
        assert 1 <= pings <= MOST_PINGS, f"{pings} PINGs for {SUBSCRIPTIONS} flushes"
    finally:
        await link.close()


def _caller(
    rounds: SharedRounds,
    operation: Callable[[], Awaitable[None]],
    timeout_s: float,
    ended: list[str],
) -> Callable[[str], Awaitable[None]]:
    """A caller of ``rounds`` that appends its name to ``ended`` once its round is done."""

    async def caller(name: str) -> None:
        await rounds.run(operation, timeout_s)
        ended.append(name)

    return caller


async def test_a_caller_asking_during_a_round_waits_for_the_next() -> None:
    rounds = SharedRounds()
    started: list[int] = []
    release = [anyio.Event(), anyio.Event()]
    ended: list[str] = []

    async def operation() -> None:
        n = len(started)
        started.append(n)
        await release[n].wait()

    caller = _caller(rounds, operation, BOUND_S, ended)

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller, "first")
            while not started:  # the first round runs
                await anyio.lowlevel.checkpoint()
            tg.start_soon(caller, "second")
            tg.start_soon(caller, "third")
            for _ in range(10):  # let them queue behind the running round
                await anyio.lowlevel.checkpoint()
            assert started == [0]
            release[0].set()
            while len(ended) < 1 or len(started) < 2:
                await anyio.lowlevel.checkpoint()
            assert ended == ["first"]  # the others wait for a round that began after them
            release[1].set()
    assert sorted(ended) == ["first", "second", "third"]
    assert started == [0, 1]  # the second and third shared one round
    assert rounds.rounds == 2


async def test_a_failed_round_fails_its_callers_and_the_next_round_runs() -> None:
    rounds = SharedRounds()
    calls = 0

    async def failing() -> None:
        nonlocal calls
        calls += 1
        raise TimeoutError("no PONG")

    with anyio.fail_after(BOUND_S):
        with pytest.raises(TimeoutError):
            await rounds.run(failing, BOUND_S)
        with pytest.raises(TimeoutError):
            await rounds.run(failing, BOUND_S)
    assert calls == 2


async def test_a_caller_queued_behind_a_slow_round_has_its_own_round_bound() -> None:
    """Each round is bounded by its operation; a caller's wait covers the round running
    when it asked and then its own (a bound on the whole wait failed every caller queued
    behind a slow round: hundreds of subscription confirmations at a loaded failover)."""
    rounds = SharedRounds()
    timeout_s = 0.5
    running = anyio.Event()

    async def slow() -> None:  # within its bound, but more than half of it
        running.set()
        await anyio.sleep(0.6 * timeout_s)

    outcome: list[str] = []
    caller = _caller(rounds, slow, timeout_s, outcome)

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller, "first")
            await running.wait()
            tg.start_soon(caller, "queued 1")  # starts the next round
            tg.start_soon(caller, "queued 2")  # waits for it
    assert sorted(outcome) == ["first", "queued 1", "queued 2"]
    assert rounds.rounds == 2
