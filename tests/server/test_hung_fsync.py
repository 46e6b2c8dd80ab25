"""An ALL-acked Produce whose fsync never returns (a hung disk) is answered TIMEOUT at its
timeout, by the server, while the server serves its other partitions.

A one-message ALL-acked request on a server alone is answered by its commit, with no
task (broker/produce_one.py, ``AnswerAtCommit``). Its commit waits for the fsync; a disk
that stops answering holds that fsync in its worker thread for as long as it likes. The
request's own timeout (``timeout_ms``, capped by ``[limits] max_produce_timeout_s``)
bounds the answer, as it bounds the general path's (a request of two messages, in its
task, checked here too): TIMEOUT then (retriable: the record may or may not be stored),
whatever the fsync does later. Before, the one-step request had no answer until the fsync
returned: none while the gate was closed.

One `jet server` process runs with the fsync shim's gate (tests/support/fsync_fault.py)
over one stream's segment files only, and ``fsync_on_loop = false``, so that stream's
fsyncs wait in a worker thread while the test holds the gate closed (an fsync on the
event loop that never returns would stop the whole loop: the runner puts an fsync there
only while fsyncs are fast, storage/fsync_runner.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from cluster.harness import wait_until_async
from jetsdk import AckPolicy, Client
from jetsdk.codec.error_codes import RETRIABLE, ErrorCode
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, ProduceResult
from jetsdk.errors import Timeout, error_class
from support.fsync_fault import FsyncGate
from support.jet_server import records_after_restart, start_server_process, stopping
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

BOUND_S = 30.0
TIMEOUT_MS = 1000


async def test_an_all_answer_on_a_hung_fsync_times_out_and_the_rest_is_served(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    gate = FsyncGate(tmp_path / "gate", match="/streams/hung-")
    data_dir = tmp_path / "data"
    settings = {"storage": {"fsync_on_loop": False}}
    with stopping(
        start_server_process(
            nats_server.url, data_dir, "--log-level", "INFO", env=gate.env(), settings=settings
        )
    ) as proc:
        try:
            with anyio.fail_after(BOUND_S):
                async with (
                    await RawClient.connect(proc.address) as c,
                    await RawClient.connect(proc.address) as held_client,
                ):
                    for name in ("hung", "free"):
                        await c.create_stream(name=name, subject=name, durability="flushed")
                    for value in (b"acked-0", b"acked-1"):
                        (acked,) = await c.produce(
                            "hung", 0, [ProduceMessage(value)], ack_policy=AckPolicy.ALL
                        )
                        assert acked.error_code == ErrorCode.NONE
                    gate.close()
                    held: list[ProduceResult] = []
                    took = 0.0

                    async def produce_held() -> None:
                        nonlocal took
                        start = time.monotonic()
                        held.extend(
                            await held_client.produce(
                                "hung",
                                0,
                                [ProduceMessage(b"held")],
                                ack_policy=AckPolicy.ALL,
                                timeout_ms=TIMEOUT_MS,
                            )
                        )
                        took = time.monotonic() - start

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(produce_held)
                        await wait_until_async(gate.blocked.exists, BOUND_S, "the fsync held")
                        # The other partition is served meanwhile, ack ALL included.
                        for i in range(3):
                            (free,) = await c.produce(
                                "free", 0, [ProduceMessage(b"f%d" % i)], ack_policy=AckPolicy.ALL
                            )
                            assert (free.error_code, free.offset) == (ErrorCode.NONE, i)
                    assert [r.error_code for r in held] == [ErrorCode.TIMEOUT]
                    assert TIMEOUT_MS / 1000 - 0.1 <= took < TIMEOUT_MS / 1000 + 5.0
                    # Two messages: the general path, in the request's task.
                    start = time.monotonic()
                    two = await held_client.produce(
                        "hung",
                        0,
                        [ProduceMessage(b"two-0"), ProduceMessage(b"two-1")],
                        ack_policy=AckPolicy.ALL,
                        timeout_ms=TIMEOUT_MS,
                    )
                    took = time.monotonic() - start
                    assert [r.error_code for r in two] == [ErrorCode.TIMEOUT] * 2
                    assert TIMEOUT_MS / 1000 - 0.1 <= took < TIMEOUT_MS / 1000 + 5.0
                    assert gate.blocked.exists()  # still held: the answer did not wait
                    # Through the SDK's client: its typed, retriable error, the server's
                    # answer (no retry; the client's own wait is longer).
                    async with Client(proc.address) as client:
                        request = ProduceRequest(
                            "hung", 0, AckPolicy.ALL, TIMEOUT_MS, (ProduceMessage(b"sdk"),)
                        )
                        start = time.monotonic()
                        (result,) = await client.produce(request, retry_if=lambda _e: False)
                        took = time.monotonic() - start
                    error = error_class(result.error_code)
                    assert error is Timeout
                    assert issubclass(error, TimeoutError)
                    assert result.error_code in RETRIABLE
                    assert TIMEOUT_MS / 1000 - 0.1 <= took < TIMEOUT_MS / 1000 + 5.0
                    gate.open()

                    async def committed() -> bool:
                        answer = await c.list_offsets("hung", 0, "latest")
                        return bool(answer["offset"] >= 3)

                    await wait_until_async(committed, BOUND_S, "the held record committed")
        finally:
            gate.open()
    records = await records_after_restart(nats_server.url, data_dir, "hung", BOUND_S)
    values = [r.value for r in records]
    assert values[:2] == [b"acked-0", b"acked-1"]  # nothing acknowledged lost
    assert set(values[2:]) <= {b"held", b"two-0", b"two-1", b"sdk"}  # timed out: may be stored
