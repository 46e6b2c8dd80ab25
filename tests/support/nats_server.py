"""The nats-server of the tests: :class:`jetserver.testing.NatsServer` (public test kit).

with NatsServer() as nats:          # or NatsServer(jetstream=True)
    nc = await nats_py.connect(nats.url)
    nats.restart()                   # same port: clients reconnect
"""

from __future__ import annotations

from jetserver.testing import NatsServer, NatsServerError, find_nats_server

__all__ = ["NatsServer", "NatsServerError", "find_nats_server"]
