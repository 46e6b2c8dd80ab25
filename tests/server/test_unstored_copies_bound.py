"""A replicated leader's NATS copies wait for NATS at most the time they are given
(``NatsLink.publish_unstored_copies(within_s=...)``).

A replicated partition's ALL-acked Produce appended in its own task has no cancel scope
for its timeout (broker/produce.py, ``at_once``): the one wait on its way that nothing else
bounds is nats-py's forced flush once its pending buffer is full. Here a real nats-server,
paused (SIGSTOP), and a link with a 64 KiB pending buffer: copies of 256 KiB are published
until NATS's socket takes no more; every call returns within its bound, and with no bound
a call waits on (it is cancelled by the test).
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import attrs
import pytest

from jetserver.natslink.link import NatsLink
from jetserver.testing import in_process_config
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

WITHIN_S = 0.3
SLACK_S = 2.0
"""A loaded machine's lateness past the bound."""
CALLS = 400
"""Copies published at most (100 MiB): far more than the sockets between take."""
VALUE = b"c" * (256 * 1024)
BOUND_S = 60.0


def _link(nats_server: NatsServer) -> NatsLink:
    nats = in_process_config(nats_server.url, Path("/nonexistent")).nats
    return NatsLink(attrs.evolve(nats, pending_bytes=64 * 1024, ping_interval_s=60.0))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_copies_wait_for_a_stalled_nats_at_most_their_bound(
    nats_server: NatsServer,
) -> None:
    link = _link(nats_server)
    await link.connect()
    try:
        nats_server.pause()
        try:
            longest = 0.0
            with anyio.fail_after(BOUND_S):
                for _ in range(CALLS):
                    started = time.monotonic()
                    await link.publish_unstored_copies([("copies", VALUE)], b"", WITHIN_S)
                    took = time.monotonic() - started
                    longest = max(longest, took)
                    if took >= WITHIN_S:
                        break  # NATS takes no more: this call waited for its bound
            assert WITHIN_S <= longest < WITHIN_S + SLACK_S, longest
            # Without a bound the same call waits for NATS.
            with anyio.move_on_after(WITHIN_S + SLACK_S) as unbounded:
                await link.publish_unstored_copies([("copies", VALUE)], b"")
            assert unbounded.cancel_called  # (nats-py swallows the cancellation: not caught)
        finally:
            nats_server.resume()
    finally:
        with anyio.fail_after(BOUND_S):
            await link.close()
