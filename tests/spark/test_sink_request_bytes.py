"""A sink task's Produce requests hold up to 4 MiB (``_write.MAX_CHUNK_BYTES``, issue 39:
fewer round trips than 1 MiB at 16 KiB values), and at most half the server's frame limit
(its Hello's ``max_frame_bytes``): against a real server whose frames hold 2 MiB, 16 KiB
rows to one partition go in requests of at most 1 MiB and are all stored once (with 4 MiB
requests whatever the limit, the server closed the connection at the first: connection
reset by peer)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pyarrow as pa
import pytest

from jetsdk import Client
from jetspark import _write
from jetspark._bridge import shared_bridge
from jetspark.options import sink_options
from support.jet_server import running_server
from support.nats_server import NatsServer

ROWS = 400
VALUE_BYTES = 16 * 1024
FRAME_BYTES = 2 * 1024 * 1024


def test_the_request_bound_is_4_mib_or_half_the_frame_limit() -> None:
    assert _write.MAX_CHUNK_BYTES == 4 << 20
    assert _write.chunk_bytes_for(16 << 20) == 4 << 20  # the default frame limit
    assert _write.chunk_bytes_for(FRAME_BYTES) == 1 << 20
    assert _write.chunk_bytes_for(1) == 1


@pytest.mark.anyio
async def test_requests_fit_a_server_with_small_frames(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    settings: dict[str, object] = {"limits__max_frame_bytes": FRAME_BYTES}
    async with running_server(nats_server.url, tmp_path / "data", **settings) as jet:
        async with Client(jet.address) as client:
            await client.create_stream("small-frames", "small.frames", partitions=1)
        opts = sink_options({"servers": jet.address, "stream": "small-frames"})
        batch = pa.record_batch(
            {"value": pa.array([b"%05d" % i + b"x" * VALUE_BYTES for i in range(ROWS)])}
        )

        def write() -> tuple[int, _write.WriteStats]:
            bridge = shared_bridge(opts.servers, request_timeout=opts.request_timeout)
            try:
                writer = _write._TaskWriter(opts, 7, 0)
                return writer.request_bytes, _write.write_batches(opts, 7, 0, [batch])
            finally:
                bridge.close()

        request_bytes, stats = await anyio.to_thread.run_sync(write)
        assert request_bytes == 1 << 20
        assert (stats.written, stats.duplicates) == (ROWS, 0)
        async with Client(jet.address) as client:
            info = await client.list_offsets("small-frames", 0, "latest")
        assert info.hw == ROWS
