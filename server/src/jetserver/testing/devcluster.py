"""``jet dev``'s cluster: :class:`jetserver.testing.Cluster` with a data directory that
survives restarts.

One nats-server plus N ``jet server`` processes on 127.0.0.1, all children of this process
and stopped by PID. Data goes to ``root`` (a temporary directory, removed at stop, unless
one is given): server ``sN`` keeps its data in ``<root>/sN`` and its config, ready file and
log in ``<root>/sN.run``.

With ``size > 1`` the servers form a cluster (spec/cluster.md) with a generated cluster
password. Ports and password are kept in ``<root>/devcluster.json`` (mode 0600) so that a
dev cluster started again on the same data directory finds its members at the same
addresses. A single server runs without a cluster, on a port chosen at start.

Thread safety: one owner per instance.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import attrs
import orjson

from jetserver.errors import JetServerError
from jetserver.testing.cluster import Cluster
from jetserver.testing.jet_process import READY_TIMEOUT_S, free_ports

__all__ = ["LAYOUT_FILE", "MAX_DEV_SERVERS", "DevCluster", "DevClusterError"]

MAX_DEV_SERVERS = 9
"""Most servers a dev cluster runs."""
LAYOUT_FILE = "devcluster.json"
"""Ports and password of a dev cluster, in its data directory."""


class DevClusterError(JetServerError):
    """The dev cluster could not start (bad arguments)."""


@attrs.define(eq=False)
class DevCluster(Cluster):
    """A :class:`~jetserver.testing.Cluster` whose layout persists in its root."""

    size: int = 1

    def server_dirs(self, server_id: str) -> tuple[Path, Path]:
        """Data in ``<root>/sN`` (as before the test kit), run files beside it."""
        assert self.root is not None
        return self.root / f"{server_id}.run", self.root / server_id

    def plan_ports(self, ids: list[str]) -> dict[str, tuple[int, int]]:
        """A single server: a port chosen at start. A cluster: the ports in the layout
        file, or new free ones (written there with a new password)."""
        if not self.clustered:
            return {i: (0, 0) for i in ids}
        assert self.root is not None
        path = self.root / LAYOUT_FILE
        try:
            layout: Any = orjson.loads(path.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            layout = None
        if not isinstance(layout, dict) or sorted(layout.get("servers", {})) != sorted(ids):
            ports = iter(free_ports(2 * len(ids)))
            layout = {
                "password": secrets.token_urlsafe(24),
                "servers": {i: {"port": next(ports), "raft_port": next(ports)} for i in ids},
            }
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(orjson.dumps(layout, option=orjson.OPT_INDENT_2))
        self.password = str(layout["password"])
        return {
            i: (int(layout["servers"][i]["port"]), int(layout["servers"][i]["raft_port"]))
            for i in ids
        }

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start nats-server and the servers (see :meth:`Cluster.start`).

        Raises:
            DevClusterError: ``size`` out of range.
        """
        if not 1 <= self.size <= MAX_DEV_SERVERS:
            raise DevClusterError(
                f"--servers {self.size}: a dev cluster runs 1 to {MAX_DEV_SERVERS} servers"
            )
        super().start(timeout_s)
