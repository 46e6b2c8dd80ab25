"""A follower with durability ``replicated`` appends small fetched records on the event loop
and reports them in its next fetch at once: no worker-thread round trip in between
(anyio's, two wake-ups and some 110 calls before the report at light load, on the way of
every ``replicated`` ALL ack at RF 3). Its flusher fsyncs them in the background as before
(``request_flush``).

The leader is a small ReplicaFetch peer on a real 127.0.0.1 socket that answers the first
fetch with one record and records the offsets the follower's fetches report; the
follower's log is real. Failed before: the append went through ``anyio.to_thread``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import pytest

from jetsdk.codec.record import encode_body, frame_body
from jetsdk.codec.replica_fetch import ReplicaFetchAnswer
from jetserver.replication.config import ReplicationConfig
from jetserver.replication.fetcher import FollowerFetcher
from jetserver.storage import Log
from support.fetchers import follower_fetcher, ignore_hw, session_to
from support.frames_in import replica_fetch_reply, replica_fetches

pytestmark = pytest.mark.anyio

CONFIG = ReplicationConfig(fetch_max_wait_s=5.0, request_slack_s=5.0)
BOUND_S = 10.0


async def test_a_replicated_follower_reports_a_small_append_without_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets: list[int] = []
    reported = anyio.Event()
    threads: list[Any] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(fn: Any, *args: Any, **kw: Any) -> Any:
        threads.append(fn)
        return await run_sync(fn, *args, **kw)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)

    async def serve(listener: anyio.abc.SocketListener) -> None:
        async def handle(conn: anyio.abc.SocketStream) -> None:
            async with conn:
                async for frame, req in replica_fetches(conn):
                    offsets.append(req.partitions[0].offset)
                    if len(offsets) == 1:
                        record = frame_body(0, 5, 0, encode_body(b"x"))
                        answer = ReplicaFetchAnswer(0, 0, hw=0, log_start=0, leo=1, records=record)
                        await conn.send(replica_fetch_reply(frame, [answer]))
                    else:
                        reported.set()  # parked: the follower has nothing more to do

        await listener.serve(handle)

    flushes: list[int] = []
    with Log.open(tmp_path / "p-0") as log_:
        async with session_to(serve, CONFIG) as (tg, port, session):
            fetcher = follower_fetcher(
                FollowerFetcher, "p", port, log_, CONFIG, on_hw=ignore_hw, session=session
            )
            fetcher.durability = "replicated"
            fetcher.request_flush = lambda: flushes.append(log_.log_end_offset)
            tg.start_soon(fetcher.run)
            with anyio.fail_after(BOUND_S):
                await reported.wait()
            fetcher.stop()
            tg.cancel_scope.cancel()
        assert offsets == [0, 1]  # the second fetch reported the record
        assert log_.log_end_offset == 1
        assert flushes == [1]  # its fsync left to the partition's flusher
        assert threads == []
