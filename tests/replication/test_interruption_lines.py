"""Issue 34: the followers of one leader log an interruption once per cause per interval,
not once per partition (jetserver.infra.log_tally, the fetch session's tally).

A failover of 3,334 leaderships made a survivor log "replication interrupted" 7,783 times.
The leader here is a small ReplicaFetch peer on a real 127.0.0.1 socket that answers
every partition of every request UNAVAILABLE (a leader that has not opened its
partitions: an unexpected interruption, logged at INFO at once). ``FOLLOWERS`` real
:class:`FollowerFetcher` s over real logs share one session to it:

- while they all fail, one INFO line says so (before: one per partition);
- at the end of the interval, one "(repeated)" line counts the others (``more``).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import anyio
import anyio.abc
import pytest

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.replica_fetch import (
    ReplicaFetchAnswer,
)
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.storage import Log
from support.fetchers import FAST_FETCH, follower_fetcher, ignore_hw, session_to
from support.frames_in import replica_fetch_reply, replica_fetches

pytestmark = pytest.mark.anyio

FOLLOWERS = 20
BOUND_S = 10.0
"""Bound on every wait."""
INTERVAL_S = 0.5
"""The session's tally interval here (5 s in a server)."""


async def serve_unavailable(listener: anyio.abc.SocketListener) -> None:
    """Answer every partition of every ReplicaFetch request UNAVAILABLE, at once."""

    async def handle(conn: anyio.abc.SocketStream) -> None:
        async with conn:
            async for frame, req in replica_fetches(conn):
                answers = [
                    ReplicaFetchAnswer(
                        i, int(ErrorCode.UNAVAILABLE), -1, -1, -1, "not open on this server"
                    )
                    for i in range(len(req.partitions))
                ]
                await conn.send(replica_fetch_reply(frame, answers))

    await listener.serve(handle)


class _Lines(logging.Handler):
    """Keeps the fetchers' INFO "replication interrupted" lines; sets ``repeated`` at the
    first "(repeated)" one."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.repeated = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("replication interrupted"):
            self.records.append(record)
            if "(repeated)" in record.getMessage():
                self.repeated.set()


class _Failing(FollowerFetcher):
    """Sets ``failed`` after its second failed fetch."""

    failed: anyio.Event

    async def _pause_after(self, exc: Exception, *, quiet: bool = False) -> None:
        await super()._pause_after(exc, quiet=quiet)
        if self.interruptions.failures >= 2:
            self.failed.set()


async def test_followers_of_one_leader_log_an_interruption_once(tmp_path: Path) -> None:
    logger = logging.getLogger("jetserver.replication.fetcher")
    lines = _Lines()
    logger.addHandler(lines)
    level = logger.level
    logger.setLevel(logging.INFO)
    fetchers: list[_Failing] = []
    try:
        async with session_to(serve_unavailable, FAST_FETCH, users=FOLLOWERS) as (tg, port, s):
            s.interrupted.interval_s = INTERVAL_S
            for i in range(FOLLOWERS):
                f = follower_fetcher(
                    _Failing,
                    f"p{i}",
                    port,
                    Log.open(tmp_path / f"p{i}-0"),
                    FAST_FETCH,
                    on_hw=ignore_hw,
                    session=s,
                )
                f.failed = anyio.Event()
                fetchers.append(f)
                tg.start_soon(f.run)
            with anyio.fail_after(BOUND_S):
                for f in fetchers:
                    await f.failed.wait()
            first = [r for r in lines.records if "(repeated)" not in r.getMessage()]
            # One line for the cause, not one per partition (FOLLOWERS before).
            assert len(first) == 1, [r.getMessage() for r in first]
            with anyio.fail_after(BOUND_S):
                await lines.repeated.wait()
            tg.cancel_scope.cancel()
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
        for f in fetchers:
            f.log.close()
    summary = next(r for r in lines.records if "(repeated)" in r.getMessage())
    values = summary.jet_fields  # type: ignore[attr-defined]
    assert values["more"] == FOLLOWERS - 1, values
    assert re.fullmatch(r"Unavailable\(.*", values["error"]), values
    assert values["leader"] == "l1"
