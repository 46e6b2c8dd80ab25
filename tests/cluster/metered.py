"""A test cluster whose servers serve Prometheus metrics, and reading them.

with metered_cluster(root, settings) as (cluster, ports):   # server id -> metrics port
    per_leader(ports["s2"], "jet_fetch_session_requests_total")
    per_leader(metrics_port(cluster, "s2"), "jet_fetch_session_requests_total")  # the same
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cluster.harness import Cluster
from jetserver.testing import free_ports

SCRAPE_TIMEOUT_S = 5.0
"""Bound on one scrape."""


@contextmanager
def metered_cluster(
    root: Path, settings: Mapping[str, Mapping[str, Any]], size: int = 3
) -> Iterator[tuple[Cluster, dict[str, int]]]:
    """A running cluster of ``size`` servers (``settings`` in their config files), each
    with its metrics on a free port; yields it and server id -> metrics port.

    The client, Raft and metrics ports come from one :func:`free_ports` call: chosen in
    two calls, a metrics port could be handed out again as a client or Raft port (a CI
    run's servers exited with "Address already in use")."""
    ids = [f"s{i + 1}" for i in range(size)]
    chosen = iter(free_ports(3 * size))
    planned = {sid: (next(chosen), next(chosen)) for sid in ids}
    ports = {sid: next(chosen) for sid in ids}
    env = {sid: {"JET_METRICS_PORT": str(port)} for sid, port in ports.items()}
    with Cluster(root=root, size=size, settings=settings, server_env=env, ports=planned) as cluster:
        yield cluster, ports


def metrics_port(cluster: Cluster, server_id: str) -> int:
    """The metrics port of ``server_id`` in a cluster :func:`metered_cluster` started."""
    return int(cluster.server_env[server_id]["JET_METRICS_PORT"])


def scrape(port: int) -> str:
    """The metrics text served on 127.0.0.1:``port``."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as answer:
        text: str = answer.read().decode()
    return text


def per_leader(port: int, metric: str) -> dict[str, int]:
    """Leader address -> value of ``metric`` (a series labelled by ``leader`` alone)."""
    found = re.findall(rf'^{metric}\{{leader="([^"]+)"\}} (\d+)$', scrape(port), re.M)
    return {leader: int(n) for leader, n in found}
