"""Racing compare-and-set writers and where an ALL ack's fsync runs (issue 38's CAS row).

On a server alone with durability ``flushed``, an ALL-acked request that appended in its own
task fsyncs there too, on the event loop while the loop looks free
(:class:`jetserver.storage.fsync_runner.FsyncRunner`). A writer whose compare-and-set lost to the
records being fsynced retries within a round trip; with the fsync on the loop its retry
waited until the disk was done, so racing writers committed one increment per fsync.
A partition that refused a compare-and-set since its last commit in a request's task
therefore fsyncs in a worker thread, and the retry is read and appended meanwhile.
"""

from __future__ import annotations

import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from jetserver.server import Server
from support.fsync_choice import fsyncs_on_the_loop
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

HEADER = "Jet-Expected-Key-Offset"


def cas(value: bytes, expected: int) -> ProduceMessage:
    return ProduceMessage(value=value, key=b"n", headers=((HEADER, str(expected).encode()),))


async def test_a_commit_after_a_lost_race_fsyncs_off_the_loop(
    jet: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs_on_the_loop(monkeypatch)  # the runner would run every fsync on the loop
    async with await RawClient.connect(jet.address) as c:
        await c.create_stream(name="race", subject="race.x", compact=True)
        runner = jet.streams.replica("race", 0).committer.fsyncs

        async def write(value: bytes, expected: int) -> tuple[ErrorCode, int, int, int]:
            on_loop, threads = runner.loop_fsyncs, runner.thread_fsyncs
            (result,) = await c.produce("race", 0, [cas(value, expected)], ack_policy=AckPolicy.ALL)
            grew = runner.loop_fsyncs - on_loop, runner.thread_fsyncs - threads
            return (result.error_code, result.offset, *grew)

        # No race yet: the commit's fsync runs on the loop.
        assert await write(b"1", -1) == (ErrorCode.NONE, 0, 1, 0)
        # A writer that lost (expected -1, the key is at 0): refused, nothing to fsync.
        assert await write(b"1", -1) == (ErrorCode.WRONG_EXPECTED_KEY_OFFSET, 0, 0, 0)
        # The next commit, after a lost race: in a worker thread.
        assert await write(b"2", 0) == (ErrorCode.NONE, 1, 0, 1)
        # No race since: back on the loop.
        assert await write(b"3", 1) == (ErrorCode.NONE, 2, 1, 0)
