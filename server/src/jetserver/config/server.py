"""Server configuration: one frozen attrs class per section, with its defaults beside it.

Durations are float seconds (``*_s``); sizes are bytes. Loading from a TOML file, the
environment and flags lives in :mod:`jetserver.config.load`; this module only declares the
shape, the defaults and the checks of each value.

TOML layout (every key optional)::

    [server]   id, data_dir, shutdown_timeout_s, event_loop
    [listen]   host, port, ready_file, advertise
    [nats]     servers, user, password, token, tls_ca, tls_cert, tls_key, ...
    [limits]   max_frame_bytes, max_message_bytes, max_inflight_per_connection, ...
    [ingest]   max_batch_bytes, max_pending_bytes, ...
    [storage]  segment_max_bytes, segment_max_age_s, index_interval_bytes, ...
    [fetch]    io ("sendfile", "read" or "auto"), sendfile_min_bytes
    [logging]  level, format ("text" or "json")
    [metrics]  port (None: off), host
    [cluster]  raft_address, peers, password / password_file, ... (absent: one server alone)
    [tls]      cert, key, ca, client_auth, peer_* (jetserver.security.config)
    [auth]     enabled, users, tokens, tls_identity, internal_token, acls
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from jetsdk.codec.limits import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    MAX_FRAME_BYTES,
    MAX_VALUE_BYTES,
)
from jetsdk.codec.stream_settings import (
    MAX_DURATION_S,
    MAX_SEGMENT_MAX_BYTES,
    MIN_SEGMENT_MAX_BYTES,
)
from jetsdk.transport import DEFAULT_PORT
from jetserver.config.cluster import ClusterConfig
from jetserver.config.validators import (
    int_in,
    non_negative,
    one_of,
    optional_non_negative,
    positive,
)
from jetserver.errors import ConfigError
from jetserver.replication.config import ReplicationConfig
from jetserver.security.config import AuthConfig, TlsConfig
from jetserver.storage.config import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_OPEN_SEALED_FILES,
    DEFAULT_SEGMENT_MAX_AGE_S,
    DEFAULT_SEGMENT_MAX_BYTES,
    MAX_INDEX_INTERVAL_BYTES,
)

MiB = 1024 * 1024
_positive = positive()
_non_negative = non_negative()


# --------------------------------------------------------------------------------------
# [server]

DEFAULT_SERVER_ID = "s1"
DEFAULT_DATA_DIR = "jet-data"
DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0
EVENT_LOOPS = ("auto", "uvloop", "asyncio")
"""``[server] event_loop`` choices: ``auto`` takes uvloop where it is installed (a
dependency of the server on Linux and macOS), else asyncio's own loop."""


@attrs.frozen
class ServerSection:
    """Identity and data location of this server."""

    id: str = DEFAULT_SERVER_ID
    """Server id, unique in a cluster (letters, digits, ``-`` and ``_``)."""
    data_dir: str = DEFAULT_DATA_DIR
    """Directory holding metadata.json and every partition's log."""
    shutdown_timeout_s: float = attrs.field(default=DEFAULT_SHUTDOWN_TIMEOUT_S, validator=_positive)
    """How long a clean shutdown may take before in-flight requests are cut."""
    event_loop: str = attrs.field(default="auto", validator=one_of(*EVENT_LOOPS))
    """Event loop of ``jet server``: ``auto``, ``uvloop`` or ``asyncio``. On uvloop the
    server took 13-31 % less CPU per message (interleaved pairs at 500 msg/s, loaded dev
    VM, 2026-11-26); no latency change was shown."""

    def __attrs_post_init__(self) -> None:
        if not self.id or not all(c.isalnum() or c in "-_" for c in self.id):
            raise ConfigError(f"server id must be letters, digits, '-' or '_', got {self.id!r}")
        if not self.data_dir:
            raise ConfigError("data_dir must not be empty")


# --------------------------------------------------------------------------------------
# [listen]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_BACKLOG = 128


@attrs.frozen
class ListenConfig:
    """Where the client protocol listens."""

    host: str = DEFAULT_HOST
    """Interface to bind (``0.0.0.0`` for all)."""
    port: int = DEFAULT_PORT
    """TCP port; 0 picks a free one (see ``ready_file``)."""
    ready_file: str | None = None
    """If set, ``{"address": "host:port"}`` JSON is written here once listening."""
    advertise: str | None = None
    """``host:port`` clients should use to reach this server (default: the bound address)."""
    backlog: int = attrs.field(default=DEFAULT_BACKLOG, validator=_positive)
    """Listen backlog."""

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be within 0..65535, got {self.port}")


# --------------------------------------------------------------------------------------
# [nats]

DEFAULT_NATS_SERVERS = ("nats://127.0.0.1:4222",)
DEFAULT_NATS_NAME = "jet-server"
DEFAULT_NATS_CONNECT_TIMEOUT_S = 5.0
DEFAULT_NATS_RECONNECT_WAIT_S = 0.25
DEFAULT_NATS_RECONNECT_MAX_WAIT_S = 5.0
DEFAULT_NATS_MAX_RECONNECT_ATTEMPTS = -1
DEFAULT_NATS_PING_INTERVAL_S = 2.0
"""A silent NATS link (a cut network: no RST arrives) is noticed after about
``(max_outstanding_pings + 1) * ping_interval_s`` = 8 s; a leader then hands its
partitions over (cluster/handoff.py). nats-py's default of 2 minutes left a cut-off leader
in place, storing nothing, for minutes."""
DEFAULT_NATS_MAX_OUTSTANDING_PINGS = 3
COPY_BACKLOG_MAX_BYTES = 256 * MiB
"""Default of ``[ingest] copy_backlog_max_bytes``: bytes of NATS copies of directly stored
records waiting to be handed to NATS, server-wide, beyond which a direct Produce request's
response waits (:mod:`jetserver.broker.copy_backlog`)."""
DEFAULT_NATS_PENDING_BYTES = 64 * MiB
DEFAULT_NATS_SUB_PENDING_MSGS = 1_000_000
DEFAULT_NATS_SUB_PENDING_BYTES = 512 * MiB
DEFAULT_NATS_STARTUP_WAIT_S = 60.0


@attrs.frozen
class NatsConfig:
    """The NATS connection (nats-py options)."""

    servers: tuple[str, ...] = DEFAULT_NATS_SERVERS
    """Server URLs (``nats://``, ``tls://``); several for a NATS cluster."""
    user: str | None = None
    """User name (with ``password``)."""
    password: str | None = None
    """Password for ``user``."""
    token: str | None = None
    """Authentication token (instead of user and password)."""
    tls_ca: str | None = None
    """CA bundle (PEM) to verify the NATS server; enables TLS."""
    tls_cert: str | None = None
    """Client certificate (PEM) for mutual TLS; needs ``tls_key``."""
    tls_key: str | None = None
    """Private key (PEM) of ``tls_cert``."""
    tls_hostname: str | None = None
    """Host name to verify the server certificate against (default: the URL's host)."""
    creds_file: str | None = None
    """NATS credentials file (decentralized auth: user JWT + NKey seed)."""
    name: str = DEFAULT_NATS_NAME
    """Connection name shown by NATS monitoring."""
    connect_timeout_s: float = attrs.field(
        default=DEFAULT_NATS_CONNECT_TIMEOUT_S, validator=_positive
    )
    """Timeout of one connection attempt."""
    startup_wait_s: float = attrs.field(
        default=DEFAULT_NATS_STARTUP_WAIT_S, validator=_non_negative
    )
    """Seconds a starting server tries NATS before it exits with an error; 0 = forever."""
    reconnect_wait_s: float = attrs.field(
        default=DEFAULT_NATS_RECONNECT_WAIT_S, validator=_positive
    )
    """First reconnect delay; doubles per failed attempt up to ``reconnect_max_wait_s``."""
    reconnect_max_wait_s: float = attrs.field(
        default=DEFAULT_NATS_RECONNECT_MAX_WAIT_S, validator=_positive
    )
    """Longest delay between reconnect attempts."""
    max_reconnect_attempts: int = DEFAULT_NATS_MAX_RECONNECT_ATTEMPTS
    """Reconnect attempts per server before giving up; -1 = forever."""
    ping_interval_s: float = attrs.field(default=DEFAULT_NATS_PING_INTERVAL_S, validator=_positive)
    """Interval of client pings (detects a dead connection)."""
    max_outstanding_pings: int = attrs.field(
        default=DEFAULT_NATS_MAX_OUTSTANDING_PINGS, validator=_positive
    )
    """Unanswered pings before the connection is considered dead."""
    pending_bytes: int = attrs.field(default=DEFAULT_NATS_PENDING_BYTES, validator=_positive)
    """Outgoing bytes nats-py buffers while reconnecting."""
    sub_pending_msgs: int = attrs.field(default=DEFAULT_NATS_SUB_PENDING_MSGS, validator=_positive)
    """Messages a subscription may queue before NATS calls it a slow consumer."""
    sub_pending_bytes: int = attrs.field(
        default=DEFAULT_NATS_SUB_PENDING_BYTES, validator=_positive
    )
    """Bytes a subscription may queue before NATS calls it a slow consumer."""

    def __attrs_post_init__(self) -> None:
        if not self.servers:
            raise ConfigError("nats.servers must name at least one URL")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("nats.tls_cert and nats.tls_key go together")
        if self.token is not None and self.user is not None:
            raise ConfigError("use either nats.token or nats.user/password, not both")
        if self.reconnect_max_wait_s < self.reconnect_wait_s:
            raise ConfigError("nats.reconnect_max_wait_s must be >= nats.reconnect_wait_s")

    @property
    def uses_tls(self) -> bool:
        """True if a TLS context is needed (a CA, a client cert, or a ``tls://`` URL)."""
        return (
            self.tls_ca is not None
            or self.tls_cert is not None
            or any(s.startswith("tls://") for s in self.servers)
        )


# --------------------------------------------------------------------------------------
# [limits]

DEFAULT_MAX_INFLIGHT_PER_CONNECTION = 64
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_IDLE_TIMEOUT_S = 600.0
DEFAULT_READ_TIMEOUT_S = 30.0
DEFAULT_WRITE_TIMEOUT_S = 30.0
DEFAULT_MAX_PRODUCE_TIMEOUT_S = 300.0
DEFAULT_MAX_FETCH_WAIT_S = 300.0
DEFAULT_MAX_FETCH_BYTES = 8 * MiB


@attrs.frozen
class LimitsConfig:
    """Per-connection and per-message limits of the client protocol."""

    max_frame_bytes: int = attrs.field(default=DEFAULT_MAX_FRAME_BYTES, validator=_positive)
    """Largest request frame (length prefix value); a bigger prefix closes the connection."""
    max_message_bytes: int = attrs.field(default=DEFAULT_MAX_MESSAGE_BYTES, validator=_positive)
    """Largest message stored (value + key + headers), unless a stream sets its own."""
    max_inflight_per_connection: int = attrs.field(
        default=DEFAULT_MAX_INFLIGHT_PER_CONNECTION, validator=_positive
    )
    """Pipelined requests handled at once per connection; reading pauses beyond it."""
    max_connections: int = attrs.field(default=DEFAULT_MAX_CONNECTIONS, validator=_positive)
    """Client connections served at once; more are closed at accept."""
    idle_timeout_s: float = attrs.field(default=DEFAULT_IDLE_TIMEOUT_S, validator=_positive)
    """A connection with no request and nothing in flight for this long is closed."""
    read_timeout_s: float = attrs.field(default=DEFAULT_READ_TIMEOUT_S, validator=_positive)
    """A frame that started arriving must be complete within this time."""
    write_timeout_s: float = attrs.field(default=DEFAULT_WRITE_TIMEOUT_S, validator=_positive)
    """A response must be accepted by the client's socket within this time."""
    max_produce_timeout_s: float = attrs.field(
        default=DEFAULT_MAX_PRODUCE_TIMEOUT_S, validator=_positive
    )
    """Produce ``timeout_ms`` values above this are clamped (the old key
    ``max_produce_timeout_ms``, in milliseconds, is still read)."""
    max_fetch_wait_s: float = attrs.field(default=DEFAULT_MAX_FETCH_WAIT_S, validator=_positive)
    """Fetch ``max_wait_ms`` values above this are clamped (the old key
    ``max_fetch_wait_ms``, in milliseconds, is still read)."""
    max_fetch_bytes: int = attrs.field(default=DEFAULT_MAX_FETCH_BYTES, validator=_positive)
    """Fetch ``max_bytes`` values above this are clamped (a first record bigger than the
    limit is still served alone, as for any ``max_bytes``)."""

    def __attrs_post_init__(self) -> None:
        if self.max_frame_bytes > MAX_FRAME_BYTES:
            raise ConfigError(f"limits.max_frame_bytes must be <= {MAX_FRAME_BYTES}")
        if self.max_message_bytes > MAX_VALUE_BYTES:
            raise ConfigError(f"limits.max_message_bytes must be <= {MAX_VALUE_BYTES}")


# --------------------------------------------------------------------------------------
# [ingest]

DEFAULT_MAX_BATCH_BYTES = 8 * MiB
DEFAULT_MAX_PENDING_BYTES = 64 * MiB


@attrs.frozen
class IngestConfig:
    """How NATS messages are sequenced into a partition."""

    max_batch_bytes: int = attrs.field(default=DEFAULT_MAX_BATCH_BYTES, validator=_positive)
    """Most payload bytes appended in one Log.append (at least one message)."""
    max_pending_bytes: int = attrs.field(default=DEFAULT_MAX_PENDING_BYTES, validator=_positive)
    """Bytes queued per partition before the NATS callback waits (backpressure)."""
    produce_direct: bool = True
    """A server that receives a Produce request and leads its partition appends the
    messages directly, publishing their NATS copies with ``Jet-Stored`` for live
    subscribers; false: through NATS like any publisher (one more hop)."""
    copy_backlog_max_bytes: int = attrs.field(default=COPY_BACKLOG_MAX_BYTES, validator=_positive)
    """Bytes of those NATS copies waiting to be handed to NATS, server-wide, beyond which
    a direct Produce request's response waits (broker/copy_backlog.py)."""


# --------------------------------------------------------------------------------------
# [storage]

DEFAULT_HW_CHECKPOINT_INTERVAL_S = 5.0
DEFAULT_MAINTENANCE_INTERVAL_S = 60.0


@attrs.frozen
class StorageConfig:
    """Defaults for new streams' logs and background maintenance."""

    segment_max_bytes: int = attrs.field(
        default=DEFAULT_SEGMENT_MAX_BYTES,
        validator=int_in(MIN_SEGMENT_MAX_BYTES, MAX_SEGMENT_MAX_BYTES, "storage"),
    )
    """Default segment size of a new stream (within the stream setting's limits,
    spec/protocol.md "Stream settings")."""
    segment_max_age_s: float = attrs.field(
        default=DEFAULT_SEGMENT_MAX_AGE_S, validator=positive("storage", maximum=MAX_DURATION_S)
    )
    """Default age after which the active segment rolls."""
    index_interval_bytes: int = attrs.field(
        default=DEFAULT_INDEX_INTERVAL_BYTES,
        validator=int_in(1, MAX_INDEX_INTERVAL_BYTES, "storage"),
    )
    """Bytes between two offset-index entries."""
    hw_checkpoint_interval_s: float = attrs.field(
        default=DEFAULT_HW_CHECKPOINT_INTERVAL_S, validator=_positive
    )
    """How often a moved high watermark is checkpointed to disk (and always at shutdown)."""
    maintenance_interval_s: float = attrs.field(
        default=DEFAULT_MAINTENANCE_INTERVAL_S, validator=_positive
    )
    """How often retention and compaction run per partition."""
    open_sealed_files: int = attrs.field(default=DEFAULT_OPEN_SEALED_FILES, validator=_positive)
    """How many sealed (older) segment files stay open when idle, over all partitions; the
    least recently read beyond it are closed and opened again on their next read. Active
    segments are always open (one file per partition)."""
    open_in_background_from: int = attrs.field(default=1000, validator=_positive)
    """A server alone holding this many partitions or more answers before opening them
    (jetserver.broker.pending_opens): after it is ready, and each on its first use."""
    fsync_on_loop: bool = True
    """Run a partition's fsync directly on the event loop while fsyncs are fast (under
    20 ms) and take under a fifth of its time, and the fsync covers at most 256 KiB (a
    larger one runs in a worker thread while the loop reads the next requests), which
    saves about a millisecond per message
    at light load (no hand-off to a worker thread and back); false: always in a worker
    thread. Either way nothing is visible or ALL-acked before its fsync returned. The risk
    of true: a disk whose fsync stalls stalls the whole server for that one fsync, after
    which fsyncs go to worker threads for 10 s (:mod:`jetserver.storage.fsync_runner`)."""
    fsync_loop_wait_ms: float = attrs.field(default=0.0, validator=_non_negative)
    """0: an fsync that ``fsync_on_loop`` puts on the event loop runs there. Above 0: it
    runs in a worker thread that the loop waits for, up to this long (the loop stays
    blocked as for a loop fsync, but no longer): a disk whose fsync never returns then
    stops the server for this long, once, not for ever (fsyncs go to worker threads for
    10 s after it). Costs two thread wake-ups per fsync (storage/waited_sync.py)."""
    large_writes_in_thread: bool = True
    """Append a batch of a few large records (64 KiB or more in at most 64 records) from a
    worker thread, so that the event loop serves other requests while the write waits for
    an fsync of the same file (ext4 holds it then); false: on the loop, like every other
    append (:mod:`jetserver.storage.fsync_runner`)."""
    disk_free_floor_bytes: int | None = attrs.field(default=None, validator=optional_non_negative())
    """Produce, NATS ingest and CreateStream are refused (STORAGE_ERROR) while the data
    directory's file system has less free space; None: min(64 MiB, 5 % of its size); 0:
    never (jetserver.storage.space)."""
    disk_reserve_bytes: int | None = attrs.field(default=None, validator=optional_non_negative())
    """Space held in ``<data_dir>/space-reserve`` and released when a metadata write finds
    the disk full; None: min(16 MiB, 2 % of the file system's size); 0: none."""


# --------------------------------------------------------------------------------------
# [fetch]

FETCH_IO_SENDFILE = "sendfile"
FETCH_IO_READ = "read"
FETCH_IO_AUTO = "auto"
DEFAULT_FETCH_IO = FETCH_IO_SENDFILE
"""Chosen by bench/bench_fetch_io.py on the 2-core dev VM: over loopback, the server's
sendfile path beat pread+sendmsg at every response size from 4 KiB to 1 MiB (median ratios
~1.05 at 4 KiB, ~1.2 at 64 KiB, ~1.3 at 256 KiB and 1 MiB over nine runs); end to end (one
consumer process) the difference stayed within the run-to-run noise of the loaded VM."""
DEFAULT_SENDFILE_MIN_BYTES = 256 * 1024


@attrs.frozen
class FetchConfig:
    """How fetch responses are written (figures: bench/bench_fetch_io.py)."""

    io: str = attrs.field(
        default=DEFAULT_FETCH_IO,
        validator=one_of(FETCH_IO_SENDFILE, FETCH_IO_READ, FETCH_IO_AUTO),
    )
    """``sendfile`` (os.sendfile from the segment file), ``read`` (pread + one sendmsg), or
    ``auto``: read for responses below ``sendfile_min_bytes``, sendfile from there up."""
    sendfile_min_bytes: int = attrs.field(
        default=DEFAULT_SENDFILE_MIN_BYTES, validator=_non_negative
    )
    """``auto``: smallest record payload sent with os.sendfile."""

    @property
    def sendfile_threshold(self) -> int:
        """Record bytes from which os.sendfile is used (a huge value: never)."""
        if self.io == FETCH_IO_SENDFILE:
            return 1
        if self.io == FETCH_IO_READ:
            return 1 << 62
        return max(1, self.sendfile_min_bytes)


# --------------------------------------------------------------------------------------
# [logging]

DEFAULT_LOG_LEVEL = "INFO"
DEFAULT_LOG_FORMAT = "text"


@attrs.frozen
class LoggingConfig:
    """Log output (to stderr)."""

    level: str = DEFAULT_LOG_LEVEL
    """DEBUG, INFO, WARNING, ERROR."""
    format: str = attrs.field(default=DEFAULT_LOG_FORMAT, validator=one_of("text", "json"))
    """``text`` (key=value fields) or ``json`` (one object per line)."""

    def __attrs_post_init__(self) -> None:
        if self.level.upper() not in logging.getLevelNamesMapping():
            raise ConfigError(f"logging.level {self.level!r} is not a level name")


# --------------------------------------------------------------------------------------
# [metrics]

DEFAULT_METRICS_HOST = "127.0.0.1"


@attrs.frozen
class MetricsConfig:
    """The Prometheus metrics endpoint (plain text exposition over HTTP, ``GET /metrics``)."""

    port: int | None = None
    """TCP port of the endpoint; None: no endpoint; 0: any free port (logged, and in the
    ready file as ``metrics_address``)."""
    host: str = DEFAULT_METRICS_HOST
    """Interface to bind (loopback by default: the endpoint has no authentication)."""

    def __attrs_post_init__(self) -> None:
        if self.port is not None and not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be within 0..65535, got {self.port}")


# --------------------------------------------------------------------------------------


@attrs.frozen
class ServerConfig:
    """The whole configuration of one server."""

    server: ServerSection = attrs.field(factory=ServerSection)
    """Identity and data directory."""
    listen: ListenConfig = attrs.field(factory=ListenConfig)
    """Client protocol listener."""
    nats: NatsConfig = attrs.field(factory=NatsConfig)
    """NATS connection."""
    limits: LimitsConfig = attrs.field(factory=LimitsConfig)
    """Protocol and message limits."""
    ingest: IngestConfig = attrs.field(factory=IngestConfig)
    """Sequencing of NATS messages."""
    storage: StorageConfig = attrs.field(factory=StorageConfig)
    """Log defaults and maintenance."""
    fetch: FetchConfig = attrs.field(factory=FetchConfig)
    """Fetch I/O."""
    logging: LoggingConfig = attrs.field(factory=LoggingConfig)
    """Log output."""
    metrics: MetricsConfig = attrs.field(factory=MetricsConfig)
    """Prometheus metrics endpoint (off by default)."""
    cluster: ClusterConfig = attrs.field(factory=ClusterConfig)
    """Cluster membership (off by default: one server alone)."""
    tls: TlsConfig = attrs.field(factory=TlsConfig)
    """TLS on the listener and to peers (off by default)."""
    auth: AuthConfig = attrs.field(factory=AuthConfig)
    """Authentication and bootstrap grants (off by default)."""
    replication: ReplicationConfig = attrs.field(factory=ReplicationConfig)
    """Partition replication timings (a cluster only)."""

    def __attrs_post_init__(self) -> None:
        if self.limits.max_message_bytes >= self.limits.max_frame_bytes:
            raise ConfigError("limits.max_message_bytes must be below limits.max_frame_bytes")
        if self.server.id in {i for i, _ in self.cluster.peer_list()}:
            raise ConfigError(f"server id {self.server.id!r} is also listed in cluster.peers")


SECTIONS: dict[str, type[Any]] = {
    "server": ServerSection,
    "listen": ListenConfig,
    "nats": NatsConfig,
    "limits": LimitsConfig,
    "ingest": IngestConfig,
    "storage": StorageConfig,
    "fetch": FetchConfig,
    "logging": LoggingConfig,
    "metrics": MetricsConfig,
    "cluster": ClusterConfig,
    "replication": ReplicationConfig,
    "tls": TlsConfig,
    "auth": AuthConfig,
}
"""Section name -> its attrs class, in the order of ServerConfig's fields."""
