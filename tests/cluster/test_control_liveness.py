"""Liveness probes: a server that refuses connections is down at once; one whose probes
only time out (a busy event loop) counts as down only after DOWN_AFTER_S of failures."""

from __future__ import annotations

import anyio
import anyio.abc
import pytest

from jetserver.cluster import liveness as liveness_module
from jetserver.cluster.liveness import Liveness
from jetserver.cluster.peers import PeerPool
from jetserver.metadata.model import MetadataState, RegisteredServer
from jetserver.testing import free_ports


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_refused_is_down_at_once_a_silent_server_only_after_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(liveness_module, "PROBE_TIMEOUT_S", 0.2)
    (refused_port,) = free_ports(1)  # nothing listens there
    held: list[anyio.abc.SocketStream] = []
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    silent_port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def hold(stream: anyio.abc.SocketStream) -> None:
        held.append(stream)  # accepted, never answered: a stalled event loop

    servers = {
        "gone": RegisteredServer("gone", f"127.0.0.1:{refused_port}", "127.0.0.1:1"),
        "slow": RegisteredServer("slow", f"127.0.0.1:{silent_port}", "127.0.0.1:2"),
    }
    state = MetadataState(servers=servers)
    peers = PeerPool(connect_timeout_s=0.2)
    live = Liveness("me", peers, lambda: state, interval_s=0.05, down_after_s=1.0)
    async with anyio.create_task_group() as tg:
        peers.start(tg)
        tg.start_soon(listener.serve, hold)
        tg.start_soon(live.run)
        with anyio.fail_after(5):
            await live.next_round()
        assert live.is_down("gone")  # refused: the process is gone
        assert live.down_event("gone").is_set()
        assert not live.is_down("slow")  # timed out once: maybe only busy
        slow_down = live.down_event("slow")
        assert not slow_down.is_set()
        first_failure = live.probes["slow"].failing_since
        assert first_failure is not None
        with anyio.fail_after(5):
            while not live.is_down("slow"):
                await live.next_round()
        assert live.probes["slow"].at - first_failure >= 1.0
        assert slow_down.is_set()  # what followers wait on instead of a timer each
        assert not live.is_down("me")
        tg.cancel_scope.cancel()
    await peers.aclose()
    for stream in held:
        await stream.aclose()
