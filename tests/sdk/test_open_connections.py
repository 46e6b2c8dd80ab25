"""OpenConnections: one open connection per key, one dial per key at a time."""

from __future__ import annotations

import anyio
import pytest

from jetsdk.connection import Connection
from jetsdk.memory import memory_stream_pair
from jetsdk.open_connections import OpenConnections

pytestmark = pytest.mark.anyio

BOUND_S = 5.0


def _connection(label: str) -> Connection:
    client_end, _server_end = memory_stream_pair()
    return Connection(client_end, label=label)


async def test_concurrent_callers_share_one_dial_and_a_closed_one_is_dialed_again() -> None:
    pool: OpenConnections[str] = OpenConnections()
    dials: list[Connection] = []
    gate = anyio.Event()

    async def dial() -> Connection:
        await gate.wait()
        conn = _connection(f"a{len(dials)}")
        dials.append(conn)
        return conn

    got: list[Connection] = []

    async def caller() -> None:
        got.append(await pool.get("a", dial))

    with anyio.fail_after(BOUND_S):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(caller)
            await anyio.wait_all_tasks_blocked()
            assert pool.open("a") is None  # not stored before its dial returns
            gate.set()
    assert len(dials) == 1
    assert got == [dials[0]] * 3
    assert pool.open("a") is dials[0]
    await dials[0].aclose()
    assert pool.open("a") is None  # closed: not handed out
    assert pool.stored("a") is dials[0]  # but still the one stored
    again = await pool.get("a", dial)
    assert again is dials[1]
    assert pool.take_all() == [again]
    assert pool.stored("a") is None
    await again.aclose()


async def test_a_failed_dial_stores_nothing() -> None:
    pool: OpenConnections[str] = OpenConnections()

    async def failing() -> Connection:
        raise OSError("refused")

    with pytest.raises(OSError, match="refused"):
        await pool.get("b", failing)
    assert pool.stored("b") is None
    assert pool.take_all() == []
