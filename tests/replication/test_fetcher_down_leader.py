"""A follower whose leader's server is down in this server's liveness view: after a lost
connection it waits for that server to answer probes again, not retrying on its back-off
timer (a kill -9 left a survivor's thousands of followers of the dead leader retrying
together at every step: half of its loop's time in the seconds before the elections).

A real :class:`FollowerFetcher` over a real log, its leader's address a loopback port where
nothing listens (every connection refused), and a control plane whose liveness view the
test sets.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import attrs
import pytest

from jetserver.replication.fetcher import FollowerFetcher
from jetserver.storage import Log
from jetserver.testing.jet_process import free_ports
from support.control_plane import RecordingControl
from support.fetchers import FAST_FETCH, follower_fetcher, ignore_hw

pytestmark = pytest.mark.anyio

CONFIG = attrs.evolve(FAST_FETCH, leader_silence_s=30.0)
"""FAST_FETCH with a leader silence far past the test's waits."""
WATCH_S = 1.0
"""How long the down leader's follower is watched: its back-off would retry ~20 times."""
BOUND_S = 10.0


class Liveness(RecordingControl):
    """The recording control plane with a liveness view the test sets."""

    def __init__(self) -> None:
        super().__init__("f1")
        self.down = True
        self.up = anyio.Event()

    def server_down(self, server_id: str) -> bool:
        return self.down

    def server_up_event(self, server_id: str) -> anyio.Event:
        return self.up


async def test_a_follower_of_a_down_leader_waits_for_it_to_answer_again(tmp_path: Path) -> None:
    control = Liveness()
    (port,) = free_ports(1)  # nothing listens there: every connection is refused
    log_ = Log.open(tmp_path / "log")
    fetcher = follower_fetcher(
        FollowerFetcher,
        "s",
        port,
        log_,
        CONFIG,
        on_hw=ignore_hw,
        controller=control,
        server_down=control.server_down,
        server_up_event=control.server_up_event,
    )
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(fetcher.run)
            with anyio.fail_after(BOUND_S):
                while fetcher.interruptions.failures < 1:  # noqa: ASYNC110 - no event
                    await anyio.sleep(0.01)
            await anyio.sleep(WATCH_S)  # what is measured: attempts over a time
            assert fetcher.interruptions.failures == 1  # waiting for the server, not retrying
            control.down = False
            control.up.set()  # it answers probes again: the follower tries at once
            with anyio.fail_after(BOUND_S):
                while fetcher.interruptions.failures < 2:  # noqa: ASYNC110 - no event
                    await anyio.sleep(0.01)
            await anyio.sleep(WATCH_S)
            assert fetcher.interruptions.failures > 5  # up (but refusing): back-off steps
            tg.cancel_scope.cancel()
    finally:
        log_.close()
