"""From the server configuration to the metadata Raft configuration (static bootstrap).

The ``[cluster]`` section names this server's Raft address and every other member; the
password comes from ``cluster.password`` (e.g. the environment variable
``JET_CLUSTER_PASSWORD``) or from ``cluster.password_file``. Raft data lives in
``cluster.raft_dir`` (default ``<data_dir>/raft``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jetserver.config.cluster import RAFT_DIR
from jetserver.config.server import ServerConfig
from jetserver.errors import ConfigError
from jetserver.raft import RaftConfig, RaftPeer
from jetserver.raft.config import DEFAULT_CONNECTION_TIMEOUT_S, DEFAULT_LEADER_FALLBACK_S


def cluster_password(config: ServerConfig) -> str:
    """The cluster password: ``cluster.password``, else the content of ``password_file``.

    Raises:
        ConfigError: no password, or the file cannot be read.
    """
    cluster = config.cluster
    if cluster.password is not None:
        return cluster.password
    if cluster.password_file is None:
        raise ConfigError("a cluster needs a password (cluster.password_file)")
    try:
        text = Path(cluster.password_file).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot read cluster.password_file {cluster.password_file}: {exc.strerror}"
        ) from None
    if not text:
        raise ConfigError(f"cluster.password_file {cluster.password_file} is empty")
    return text


def raft_config(config: ServerConfig, **overrides: Any) -> RaftConfig:
    """The :class:`RaftConfig` of this server (``overrides``: extra RaftConfig fields).

    Raises:
        ConfigError: clustering is off, no usable password, or a bad member list.
    """
    cluster = config.cluster
    if cluster.raft_address is None:
        raise ConfigError("clustering is off (no cluster.raft_address)")
    connection_timeout = max(DEFAULT_CONNECTION_TIMEOUT_S, cluster.election_timeout_max_s)
    data_dir = Path(cluster.raft_dir or Path(config.server.data_dir) / RAFT_DIR)
    return RaftConfig(
        server_id=config.server.id,
        address=cluster.raft_address,
        peers=tuple(RaftPeer(i, a) for i, a in cluster.peer_list()),
        data_dir=data_dir,
        password=cluster_password(config),
        bind_address=cluster.raft_bind,
        heartbeat_s=cluster.heartbeat_s,
        election_timeout_min_s=cluster.election_timeout_min_s,
        election_timeout_max_s=cluster.election_timeout_max_s,
        tick_s=cluster.raft_tick_s,
        join=cluster.join,
        # A leader steps down after as long without a majority as a follower waits
        # before it elects another (1 s would make a briefly starved leader step down).
        **(
            {
                "connection_timeout_s": connection_timeout,
                "leader_fallback_s": max(DEFAULT_LEADER_FALLBACK_S, cluster.election_timeout_max_s),
            }
            | overrides
        ),
    )
