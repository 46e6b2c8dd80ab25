"""SIGTERM stops a sync group consumer as Ctrl-C does: its ``with`` blocks close, it commits
and leaves its group at once (before, Python's default action ended it
on the spot: nothing committed, its partitions held until the session timeout), and it
exits with status 143."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from jetsdk import AckPolicy, Client, Producer
from jetsdk._sigterm import SIGTERM_EXIT_STATUS
from jetsdk.consumer.group_admin import group_offsets, read_group
from jetsdk.group.stream_partition import StreamPartition
from support.jet_dev import JetDev

CHILD = Path(__file__).with_name("sigterm_child.py")
COUNT = 20
CLOSE_WITHIN_S = 20.0
"""Far below the child's 30 s session timeout: a member that did not leave would still
hold its partition when this bound is checked."""


def test_sigterm_commits_and_leaves_the_group(jet_dev: JetDev) -> None:
    stream, group = f"term-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"

    async def produce() -> None:
        async with Client(jet_dev.servers) as client:
            await client.create_stream(stream, stream)
            async with Producer(client, stream, ack=AckPolicy.ALL) as producer:
                for i in range(COUNT):
                    await producer.send(b"m%d" % i)

    anyio.run(produce)
    child = subprocess.Popen(
        [sys.executable, str(CHILD), jet_dev.server, stream, group, str(COUNT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == f"read {COUNT}"
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=CLOSE_WITHIN_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == SIGTERM_EXIT_STATUS, out + err
    assert out.strip().endswith("closed"), out + err

    async def check() -> None:
        async with Client(jet_dev.servers) as client:
            offsets = await group_offsets(client, group)
            # Committed on the way out. How far depends on where the signal found the
            # child: a batch it was still inside counts as not processed (given back,
            # redelivered: at-least-once), so the offset is 0 or COUNT, never beyond.
            committed = offsets.get(StreamPartition(stream, 0))
            assert committed is not None, "nothing committed: the with blocks did not close"
            assert committed.offset in (0, COUNT), committed
            state = await read_group(client, group)
            assert state is not None
            assert state.members() == [], "the member did not leave its group"

    anyio.run(check)


@pytest.mark.parametrize("own_handler", [False, True])
def test_the_handler_is_installed_only_over_the_default(jet_dev: JetDev, own_handler: bool) -> None:
    from jetsdk import sync

    def mine(_signum: int, _frame: object) -> None:
        return None

    previous = signal.signal(signal.SIGTERM, mine if own_handler else signal.SIG_DFL)
    try:
        with sync.Client(jet_dev.servers):
            installed = signal.getsignal(signal.SIGTERM)
            assert (installed is mine) if own_handler else callable(installed)
        after = signal.getsignal(signal.SIGTERM)
        assert after is (mine if own_handler else signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGTERM, previous)
