"""A connection the server resets as soon as it accepts it is a connection error, not a
crash: ``tcp_dialer`` took the socket over with ``stream.extra(raw_socket)``, which raised
AttributeError when the transport had already seen the reset (uvloop: about 1 dial in 5
here). A server's liveness probe dialling a peer in the middle of its stop got that
AttributeError, which ended the prober's task group and stopped the server (a CI run of
tests/cluster/test_stop_after_kill.py: the metadata Raft then lost its majority)."""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter

import anyio
import pytest

from jetsdk.errors import JetConnectionError
from jetsdk.transport import Address, tcp_dialer

pytestmark = pytest.mark.anyio

DIALS = 300
"""Dials against the resetting listener (bounded)."""


@pytest.fixture(params=[pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"), "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    return request.param


@pytest.fixture
def resetting_listener() -> object:
    """A listener that accepts each connection and resets it at once (SO_LINGER 0)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(512)

    def reset_all() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    thread = threading.Thread(target=reset_all, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    srv.close()
    thread.join(5)


async def test_a_connection_reset_at_once_is_a_connection_error(resetting_listener: int) -> None:
    outcomes: Counter[str] = Counter()
    with anyio.fail_after(60):
        for _ in range(DIALS):
            try:
                stream = await tcp_dialer(Address("127.0.0.1", resetting_listener), 5.0)
            except JetConnectionError:
                outcomes["connection error"] += 1
            else:
                outcomes["connected"] += 1
                await stream.aclose()
    assert set(outcomes) <= {"connection error", "connected"}, outcomes
    assert sum(outcomes.values()) == DIALS
