"""Configuration of the metadata Raft node: identity, static peers, secret, timing.

Durations are float seconds. The defaults are tuned for a LAN / loopback cluster: heartbeats
every 50 ms, an election after 0.3-0.6 s of silence, reconnection every 0.25 s (see
spec/cluster.md, "Metadata Raft", for the measured figures and the PySyncObj option each
value maps to).

Security: PySyncObj's transport unpickles what it receives. With a password every message is
authenticated (Fernet: AES + HMAC) before it is unpickled; without one, anyone who reaches
the Raft port runs code in the server. A :class:`RaftConfig` therefore refuses to exist
without a password of at least :data:`MIN_PASSWORD_CHARS` characters.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from jetserver.config.validators import positive
from jetserver.errors import ConfigError

DEFAULT_HEARTBEAT_S = 0.1
"""Leader heartbeat / append-entries period (PySyncObj ``appendEntriesPeriod``)."""
DEFAULT_ELECTION_TIMEOUT_MIN_S = 3.0
"""Lower bound of the randomized election timeout (``raftMinTimeout``)."""
DEFAULT_ELECTION_TIMEOUT_MAX_S = 4.5
"""Upper bound of the randomized election timeout (``raftMaxTimeout``).

These three are what servers run with (``[cluster]`` in the server config takes them as its
defaults). 0.05 s / 0.3-0.6 s (the Raft library's defaults) made the metadata leader change
every few seconds while thousands of partitions were created or failed over on a loaded 2-core
machine (load average 7-9): the Raft thread shares the interpreter and the CPU with the event
loop, and missed heartbeats for that long. 1.0-2.0 s (until 2026-11-28) still lost the leader
to the garbage collector: a collection holds the interpreter, and the Raft thread with it,
for its whole length, and the survivors of a failover at 3,000 partitions had young and
middle collections of 1.0-2.8 s (load 16-19; the collector walks the hundreds of thousands
of objects a burst of role changes makes), 6 of 24 leader changes in two runs following
such a collection within 0.1 s; the elections and ISR changes of the failover then waited
for a new metadata leader. A killed leader is replaced without waiting for the timeout
(the survivors find its process gone and hasten their elections); only a leader that
stops answering without its process ending (paused, cut off) now takes 3-4.5 s to replace.
Tests of the Raft layer alone pass faster timings."""
DEFAULT_CONNECTION_TIMEOUT_S = 4.5
"""A peer connection silent this long is dropped (``connectionTimeout``; at least the election
timeout's upper bound)."""
DEFAULT_CONNECTION_RETRY_S = 0.25
"""Reconnect to an unreachable peer this often (``connectionRetryTime``)."""
DEFAULT_LEADER_FALLBACK_S = 4.5
"""A leader without a majority's answers this long steps down (``leaderFallbackTimeout``): as
long as a follower waits before it elects another (1 s would make a briefly starved leader
step down)."""
DEFAULT_TICK_S = 0.02
"""Longest wait of the Raft thread for socket events between two timer checks."""
DEFAULT_PROPOSE_TIMEOUT_S = 5.0
"""Default bound of :meth:`MetadataRaft.propose`."""
DEFAULT_START_TIMEOUT_S = 10.0
"""Bound on binding the port and loading the journal and snapshot at start."""
DEFAULT_STOP_TIMEOUT_S = 5.0
"""Bound on stopping the Raft thread."""
DEFAULT_COMPACTION_MIN_ENTRIES = 5000
"""Snapshot and truncate the journal after this many entries (``logCompactionMinEntries``)."""
DEFAULT_COMPACTION_MIN_TIME_S = 300.0
"""... or this long after the last snapshot (``logCompactionMinTime``)."""
DEFAULT_COMPACTION_MAX_BYTES = 1024 * 1024
"""... or once the journal file passes this size: entries of a large cluster are big (a
CreateStream of 100 partitions, up to 4,000 elections in one entry), and 5,000 of them made the
journal tens of MiB."""
MIN_PASSWORD_CHARS = 16
"""Shortest accepted cluster password."""
JOURNAL_FILE = "journal.log"
"""Raft log file in ``data_dir`` (term and vote in ``journal.log.meta.json``)."""
SNAPSHOT_FILE = "snapshot.json"
"""Snapshot (PySyncObj full dump) file in ``data_dir``."""


def _check_address(address: str, what: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError(f"{what} must be host:port with a port in 1..65535, got {address!r}")


def _check_server_id(server_id: str, what: str) -> None:
    if not server_id or not all(c.isalnum() or c in "-_" for c in server_id):
        raise ConfigError(f"{what} must be letters, digits, '-' or '_', got {server_id!r}")


@attrs.frozen
class RaftPeer:
    """Another member of the metadata Raft group."""

    server_id: str
    """Its server id."""
    address: str
    """Its Raft address ``host:port``."""

    def __attrs_post_init__(self) -> None:
        _check_server_id(self.server_id, "peer server id")
        _check_address(self.address, f"raft address of peer {self.server_id}")


_positive = positive("raft")


@attrs.frozen
class RaftConfig:
    """One server's view of the metadata Raft group (static bootstrap: self + peers)."""

    server_id: str
    """This server's id."""
    address: str
    """This server's Raft address ``host:port`` (peers connect here)."""
    peers: tuple[RaftPeer, ...]
    """The other members (empty: a one-server group)."""
    data_dir: Path
    """Directory of the journal and the snapshot (created 0700)."""
    password: str = attrs.field(repr=False)
    """Cluster secret shared by every member (authenticates and encrypts Raft traffic)."""
    bind_address: str | None = None
    """Address to bind if not ``address`` (e.g. ``0.0.0.0:port`` behind NAT)."""
    heartbeat_s: float = attrs.field(default=DEFAULT_HEARTBEAT_S, validator=_positive)
    """See :data:`DEFAULT_HEARTBEAT_S`."""
    election_timeout_min_s: float = attrs.field(
        default=DEFAULT_ELECTION_TIMEOUT_MIN_S, validator=_positive
    )
    """See :data:`DEFAULT_ELECTION_TIMEOUT_MIN_S`."""
    election_timeout_max_s: float = attrs.field(
        default=DEFAULT_ELECTION_TIMEOUT_MAX_S, validator=_positive
    )
    """See :data:`DEFAULT_ELECTION_TIMEOUT_MAX_S`."""
    connection_timeout_s: float = attrs.field(
        default=DEFAULT_CONNECTION_TIMEOUT_S, validator=_positive
    )
    """See :data:`DEFAULT_CONNECTION_TIMEOUT_S`."""
    connection_retry_s: float = attrs.field(default=DEFAULT_CONNECTION_RETRY_S, validator=_positive)
    """See :data:`DEFAULT_CONNECTION_RETRY_S`."""
    leader_fallback_s: float = attrs.field(default=DEFAULT_LEADER_FALLBACK_S, validator=_positive)
    """See :data:`DEFAULT_LEADER_FALLBACK_S`."""
    tick_s: float = attrs.field(default=DEFAULT_TICK_S, validator=_positive)
    """See :data:`DEFAULT_TICK_S`."""
    propose_timeout_s: float = attrs.field(default=DEFAULT_PROPOSE_TIMEOUT_S, validator=_positive)
    """See :data:`DEFAULT_PROPOSE_TIMEOUT_S`."""
    start_timeout_s: float = attrs.field(default=DEFAULT_START_TIMEOUT_S, validator=_positive)
    """See :data:`DEFAULT_START_TIMEOUT_S`."""
    stop_timeout_s: float = attrs.field(default=DEFAULT_STOP_TIMEOUT_S, validator=_positive)
    """See :data:`DEFAULT_STOP_TIMEOUT_S`."""
    compaction_min_entries: int = attrs.field(default=DEFAULT_COMPACTION_MIN_ENTRIES)
    """See :data:`DEFAULT_COMPACTION_MIN_ENTRIES`."""
    compaction_min_time_s: float = attrs.field(
        default=DEFAULT_COMPACTION_MIN_TIME_S, validator=_positive
    )
    """See :data:`DEFAULT_COMPACTION_MIN_TIME_S`."""
    compaction_max_bytes: int = attrs.field(
        default=DEFAULT_COMPACTION_MAX_BYTES, validator=_positive
    )
    """See :data:`DEFAULT_COMPACTION_MAX_BYTES`."""
    dynamic_membership: bool = True
    """Allow :meth:`MetadataRaft.add_server` / ``remove_server`` (must match on all members)."""
    join: bool = False
    """This server is being added to a running group: it starts no election before it has
    heard from a leader (otherwise its term climbs while it waits to be added, and its
    first vote request after the add deposes the leader)."""
    fsync: bool = True
    """fsync the journal before acknowledging an entry (off only for tests of speed)."""

    def __attrs_post_init__(self) -> None:
        _check_server_id(self.server_id, "raft server id")
        _check_address(self.address, "raft address")
        if self.bind_address is not None:
            _check_address(self.bind_address, "raft bind address")
        if len(self.password) < MIN_PASSWORD_CHARS:
            raise ConfigError(
                f"the cluster password must have at least {MIN_PASSWORD_CHARS} characters "
                "(Raft traffic is authenticated with it; without it anyone reaching the Raft "
                "port could run code in the server)"
            )
        ids = [self.server_id, *(p.server_id for p in self.peers)]
        addresses = [self.address, *(p.address for p in self.peers)]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"raft server ids must be unique, got {ids}")
        if len(set(addresses)) != len(addresses):
            raise ConfigError(f"raft addresses must be unique, got {addresses}")
        if self.election_timeout_min_s <= 3 * self.heartbeat_s:
            raise ConfigError("raft election_timeout_min_s must exceed 3 x heartbeat_s")
        if self.election_timeout_max_s <= self.election_timeout_min_s:
            raise ConfigError("raft election_timeout_max_s must exceed election_timeout_min_s")
        if self.connection_timeout_s < self.election_timeout_max_s:
            raise ConfigError("raft connection_timeout_s must be >= election_timeout_max_s")
        if self.leader_fallback_s <= self.heartbeat_s:
            raise ConfigError("raft leader_fallback_s must exceed heartbeat_s")
        if self.compaction_min_entries < 2:
            raise ConfigError("raft compaction_min_entries must be >= 2")

    @property
    def journal_path(self) -> Path:
        """The journal file."""
        return self.data_dir / JOURNAL_FILE

    @property
    def snapshot_path(self) -> Path:
        """The snapshot file."""
        return self.data_dir / SNAPSHOT_FILE

    def server_id_of(self, address: str) -> str | None:
        """The configured server id at Raft ``address`` (None if not a configured member)."""
        if address == self.address:
            return self.server_id
        for peer in self.peers:
            if peer.address == address:
                return peer.server_id
        return None
