"""The ``[cluster]`` section of the server's configuration: membership, Raft timings, the
cluster password (spec/cluster.md, "Cluster configuration")."""

from __future__ import annotations

import attrs

from jetserver.config.validators import int_in, positive
from jetserver.errors import ConfigError
from jetserver.raft import config as raft_config

_positive = positive()


DEFAULT_LEADER_SILENT_WINDOW_S = 5.0
DEFAULT_FORWARD_TIMEOUT_S = 10.0
DEFAULT_PROBE_INTERVAL_S = 0.5
MIN_CLUSTER_PASSWORD_CHARS = 16
RAFT_DIR = "raft"
"""Default Raft directory inside ``server.data_dir``."""


def parse_peer(text: str) -> tuple[str, str]:
    """``"id@host:port"`` -> ``(id, "host:port")``; ConfigError if not of that form."""
    server_id, sep, address = text.strip().partition("@")
    host, colon, port = address.rpartition(":")
    if (
        not sep
        or not server_id
        or not all(c.isalnum() or c in "-_" for c in server_id)
        or not colon
        or not host
        or not port.isdigit()
        or not 0 < int(port) <= 65535
    ):
        raise ConfigError(f"a peer must be written id@host:port, got {text!r}")
    return server_id, address


@attrs.frozen
class ClusterConfig:
    """Membership of a cluster (spec/cluster.md, "Cluster configuration").

    Clustering is on when ``raft_address`` is set; then a password (``password``, the
    environment variable ``JET_CLUSTER_PASSWORD``, or ``password_file``) is mandatory.
    """

    raft_address: str | None = None
    """This server's metadata Raft address ``host:port`` (None: no cluster, one server)."""
    raft_bind: str | None = None
    """Address to bind for Raft if not ``raft_address`` (NAT)."""
    peers: tuple[str, ...] = ()
    """Every other member as ``id@host:port`` (their Raft addresses)."""
    password: str | None = attrs.field(default=None, repr=False)
    """Cluster secret (>= 16 characters; identical on every member). Prefer the environment
    variable ``JET_CLUSTER_PASSWORD`` or ``password_file``."""
    password_file: str | None = None
    """File holding the cluster secret (surrounding whitespace ignored)."""
    raft_dir: str | None = None
    """Raft journal and snapshot directory (default ``<data_dir>/raft``)."""
    join: bool = False
    """This server is being added to a running cluster (no election before a leader
    contacts it); see "Adding a server" in spec/cluster.md."""
    heartbeat_s: float = attrs.field(default=raft_config.DEFAULT_HEARTBEAT_S, validator=_positive)
    """Raft heartbeat period (see :mod:`jetserver.raft.config` for why these timings)."""
    election_timeout_min_s: float = attrs.field(
        default=raft_config.DEFAULT_ELECTION_TIMEOUT_MIN_S, validator=_positive
    )
    """Raft election timeout, lower bound."""
    election_timeout_max_s: float = attrs.field(
        default=raft_config.DEFAULT_ELECTION_TIMEOUT_MAX_S, validator=_positive
    )
    """Raft election timeout, upper bound."""
    raft_tick_s: float = attrs.field(default=raft_config.DEFAULT_TICK_S, validator=_positive)
    """Longest wait of the Raft thread between two timer checks (messages and proposals
    wake it at once). Mostly for tests: a longer tick costs an idle server fewer wake-ups."""
    leader_silent_window_s: float = attrs.field(
        default=DEFAULT_LEADER_SILENT_WINDOW_S, validator=_positive
    )
    """Reports that a partition leader is silent count toward an election for this long."""
    forward_timeout_s: float = attrs.field(default=DEFAULT_FORWARD_TIMEOUT_S, validator=_positive)
    """Bound on a metadata request forwarded to the metadata leader (retries included)."""
    probe_interval_s: float = attrs.field(default=DEFAULT_PROBE_INTERVAL_S, validator=_positive)
    """How often the metadata leader checks that every registered server answers."""
    auto_leader_rebalance: bool = True
    """Move leaderships back to preferred replicas (spec/cluster.md, "Preferred leaders")."""
    leader_rebalance_interval_s: float = attrs.field(default=5.0, validator=_positive)
    """Between two preferred-leader rounds of the metadata leader."""
    leader_rebalance_max: int = attrs.field(default=500, validator=int_in(1, 1000))
    """Most leaderships one preferred-leader round moves."""

    def __attrs_post_init__(self) -> None:
        if self.raft_address is None:
            return
        parse_peer(f"x@{self.raft_address}")
        ids = [parse_peer(p)[0] for p in self.peers]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"peer ids must be unique, got {ids}")
        if self.password is None and self.password_file is None:
            raise ConfigError(
                "a cluster needs a password (cluster.password_file, or the environment "
                "variable JET_CLUSTER_PASSWORD): Raft traffic is authenticated with it, and "
                "without it anyone reaching the Raft port could run code in the server"
            )
        if self.password is not None and len(self.password) < MIN_CLUSTER_PASSWORD_CHARS:
            raise ConfigError(
                f"the cluster password must have at least {MIN_CLUSTER_PASSWORD_CHARS} characters"
            )

    @property
    def enabled(self) -> bool:
        """True if this server is a member of a cluster."""
        return self.raft_address is not None

    def peer_list(self) -> list[tuple[str, str]]:
        """``peers`` as ``(server id, raft address)`` pairs."""
        return [parse_peer(p) for p in self.peers]
