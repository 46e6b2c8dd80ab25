"""A real nats-server on a free 127.0.0.1 port, for tests and benchmarks.

    with NatsServer() as nats:          # or NatsServer(jetstream=True)
        nc = await nats_py.connect(nats.url)
        nats.restart()                   # same port: clients reconnect
        nats.stop()

Stopped by PID (SIGTERM, then SIGKILL) when the block exits.
"""

from __future__ import annotations

from jetserver.nats_process import NatsServerError, NatsServerProcess, find_nats_server

__all__ = ["NatsServer", "NatsServerError", "find_nats_server"]


class NatsServer(NatsServerProcess):
    """nats-server child process: ``.url``, ``.pid``, ``.port``, ``.stop()``, ``.restart()``.

    Use as a context manager (starts on enter, stops and removes its temp dir on exit), or
    call :meth:`start` and :meth:`cleanup` yourself.
    """
