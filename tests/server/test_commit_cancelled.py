"""A Produce request that appends and commits in its own task (ack ALL on a server alone,
durability ``flushed``) and is cancelled during its fsync (its connection closed) leaves
the commit to the partition's flusher: the record it appended is committed when the fsync
ends, with no later request to push it.

One `jet server` process runs with the fsync shim's gate (tests/support/fsync_fault.py)
and ``fsync_on_loop = false``, so the request's fsync waits in a worker thread while the
test resets the request's connection. Before the fix the cancelled request took its
commit with it: the fsync succeeded but the high watermark stayed below the record until
some other append asked for a flush (a fresh-clone CI run saw a table's writes stall for
60 s this way: a failed fetch closed the connection of two partitions' requests, and
neither the failed fsync of one nor the good fsync of the other was ever acted on).
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketAttribute

from cluster.harness import wait_until_async
from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.frames import Api, encode_frame
from jetsdk.codec.messages import ProduceMessage, ProduceRequest, encode_produce_request
from support.jet_server import gated_server_process
from support.nats_server import NatsServer
from support.raw_client import RawClient

pytestmark = pytest.mark.anyio

BOUND_S = 30.0


async def test_a_commit_whose_request_was_cancelled_still_happens(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    with gated_server_process(
        nats_server.url, tmp_path, settings={"storage": {"fsync_on_loop": False}}
    ) as (gate, proc):
        with anyio.fail_after(BOUND_S):
            async with await RawClient.connect(proc.address) as admin:
                await admin.create_stream(name="cc", subject="cc")
                gate.close()
                request = ProduceRequest("cc", 0, AckPolicy.ALL, 20_000, (ProduceMessage(b"held"),))
                sender = await RawClient.connect(proc.address)
                await sender.send_raw(encode_frame(Api.PRODUCE, 1, encode_produce_request(request)))
                await wait_until_async(gate.blocked.exists, BOUND_S, "the fsync held open")
                # A reset, not a close: a closed connection's requests may finish, a
                # failed one's (reset, a failed write) are cancelled.
                raw = sender.stream.extra(SocketAttribute.raw_socket)
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                await sender.stream.aclose()  # the request is cancelled in its fsync
                gate.open()

                async def committed() -> bool:
                    answer = await admin.list_offsets("cc", 0, "latest")
                    return bool(answer["offset"] == 1)

                await wait_until_async(committed, 10.0, "the record committed")
                records = await admin.fetch_all("cc", 0)
                assert [r.value for r in records] == [b"held"]
