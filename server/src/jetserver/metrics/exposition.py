"""Server metrics in the Prometheus text exposition format (version 0.0.4).

Two kinds of value:

- **counted as they happen** (:class:`RequestMetrics`): requests per API and outcome, and a
  latency histogram per API, updated by the server for every request frame;
- **read when scraped** (:func:`render`): partition offsets (HW, LEO, log start), ISR size,
  replica and consumer lag, NATS link state, client connections. Reading them at scrape
  time costs nothing on the request path.

Every metric is prefixed ``jet_``. Metric names, labels and meanings are listed in the
README ("Metrics"). Task safety: use from the server's event loop only.

Why not ``prometheus_client``: counting a request with its labelled Counter and Histogram
cost 1.8 to 3.6 times as much as :meth:`RequestMetrics.observe` with the children cached,
5 to 9 times with ``labels()`` per request (``bench/bench_metrics_lib.py``, issue 36), and
its scrape was not faster; the text format here is small (tests/server/test_metrics.py).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import attrs

from jetsdk.codec.error_codes import error_name
from jetsdk.codec.frames import FLAG_ERROR, FRAME_HEADER_SIZE, Api
from jetsdk.codec.messages import decode_error
from jetserver.infra.resources import NEAR_LIMIT_FRACTION, open_file_limit, open_files
from jetserver.storage.files import SEALED_FILES
from jetserver.storage.idle_files import ACTIVE_FILES

if TYPE_CHECKING:
    from jetserver.broker.copy_backlog import CopyBacklog
    from jetserver.broker.streams import StreamManager
    from jetserver.natslink.link import NatsLink
    from jetserver.protocol.listener import ProtocolListener
    from jetserver.storage.space import DiskSpace

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Upper bounds (seconds) of the request latency histogram buckets (+Inf is implicit).
Fetch long polls land in the high buckets by design."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The HTTP Content-Type of the exposition."""

_FLAGS_OFFSET = 5
"""Byte offset of the flags in a frame (u32 length, u8 api, u8 flags, u32 correlation id)."""


_API_NAMES = {int(a): a.name.lower() for a in Api}


def api_name(api: int) -> str:
    """Lower-case API name (``produce``), ``api_<n>`` for an unknown key."""
    name = _API_NAMES.get(api)
    return name if name is not None else f"api_{api}"


def reply_code(reply: bytes) -> str:
    """``NONE`` for a response frame, else the error code name of an error frame."""
    if len(reply) <= _FLAGS_OFFSET or not reply[_FLAGS_OFFSET] & FLAG_ERROR:
        return "NONE"
    try:
        return error_name(decode_error(reply[FRAME_HEADER_SIZE:]).code)
    except Exception:  # a response we built ourselves; never fail the request for a metric
        return "UNKNOWN"


@attrs.define
class Histogram:
    """Cumulative-bucket latency histogram (Prometheus semantics)."""

    bounds: Sequence[float] = LATENCY_BUCKETS_S
    """Bucket upper bounds, increasing."""
    counts: list[int] = attrs.field(init=False)
    """Observations per bucket (not cumulative; the last one is +Inf)."""
    total: float = 0.0
    """Sum of the observed values."""
    count: int = 0
    """Number of observations."""

    def __attrs_post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str, labels: str) -> Iterable[str]:
        """Exposition lines ``name_bucket``, ``name_sum``, ``name_count`` (``labels``: the
        inner text of a label set, may be empty)."""
        sep = "," if labels else ""
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            yield f'{name}_bucket{{{labels}{sep}le="{_number(bound)}"}} {running}'
        running += self.counts[-1]
        yield f'{name}_bucket{{{labels}{sep}le="+Inf"}} {running}'
        yield f"{name}_sum{{{labels}}} {_number(self.total)}"
        yield f"{name}_count{{{labels}}} {self.count}"


@attrs.define
class RequestMetrics:
    """Requests answered, by API and outcome, and their latency by API."""

    counts: dict[tuple[str, str], int] = attrs.field(factory=dict)
    """(api name, error code name or NONE) -> requests."""
    latency: dict[str, Histogram] = attrs.field(factory=dict)
    """api name -> latency histogram (handler start to reply built)."""

    _by_api: dict[int, tuple[tuple[str, str], Histogram]] = attrs.field(factory=dict, repr=False)
    """api -> (its key for a response without error, its histogram): one look-up per
    request that succeeds, no name or code worked out again."""

    def observe(self, api: int, reply: bytes, seconds: float) -> None:
        """Count one request of ``api`` answered with frame bytes ``reply`` in ``seconds``."""
        known = self._by_api.get(api)
        if known is None:
            name = api_name(api)
            hist = self.latency.get(name)
            if hist is None:
                hist = self.latency[name] = Histogram()
            known = self._by_api[api] = ((name, "NONE"), hist)
        key, hist = known
        if len(reply) > _FLAGS_OFFSET and reply[_FLAGS_OFFSET] & FLAG_ERROR:
            key = (key[0], reply_code(reply))
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        # Histogram.observe's three lines, here: one call less per request.
        hist.counts[bisect.bisect_left(hist.bounds, seconds)] += 1
        hist.total += seconds
        hist.count += 1


@attrs.define(eq=False)
class MetricsSources:
    """What :func:`render` reads at scrape time (fields are None before they exist)."""

    server_id: str
    """This server's id (label ``server``)."""
    requests: RequestMetrics = attrs.field(factory=RequestMetrics)
    """Counted requests."""
    streams: StreamManager | None = None
    """Partitions."""
    link: NatsLink | None = None
    """The NATS link."""
    copies: CopyBacklog | None = None
    """NATS copies of directly stored records not yet handed to NATS."""
    listener: ProtocolListener | None = None
    """Client connections."""
    consumer_positions: dict[tuple[str, int], int] | None = None
    """(stream, partition) -> offset asked by the latest consumer Fetch (for lag)."""
    disk: DiskSpace | None = None
    """Free space of the data directory's file system."""
    cluster: Callable[[], list[str]] | None = None
    """More exposition lines: the metadata leader's partition counts (metrics.cluster)."""


def render(src: MetricsSources) -> str:
    """The whole exposition text."""
    out: list[str] = []
    _requests(out, src.requests)
    _connections(out, src.listener)
    _nats(out, src.link)
    _copies(out, src.copies)
    _partitions(out, src)
    _fetch_sessions(out, src)
    _fsyncs(out, src)
    _files(out, src)
    _disk(out, src.disk)
    if src.cluster is not None:
        out.extend(src.cluster())
    return "\n".join(out) + "\n"


def _fetch_sessions(out: list[str], src: MetricsSources) -> None:
    sessions = src.streams.fetch_sessions if src.streams is not None else None
    if sessions is None:
        return
    open_ = sessions.sessions
    _gauge(out, "jet_fetch_sessions", "Fetch sessions open to leader servers.", len(open_))
    for name, text, attr in (
        ("jet_fetch_session_partitions", "Follower replicas using the session.", "users"),
        ("jet_fetch_session_requests_total", "ReplicaFetch requests answered.", "requests"),
        ("jet_fetch_session_wakes_total", "Wakes sent to a parked request.", "wakes"),
        (
            "jet_fetch_session_partitions_sent_total",
            "Partitions carried by the ReplicaFetch requests sent.",
            "partitions_sent",
        ),
        (
            "jet_fetch_session_full_requests_total",
            "Full ReplicaFetch requests sent (the first, and after a failure).",
            "full_requests",
        ),
        (
            "jet_fetch_session_lost_total",
            "Incremental requests the leader refused with FETCH_SESSION_LOST.",
            "sessions_lost",
        ),
    ):
        _head(out, name, "counter" if name.endswith("_total") else "gauge", text)
        out.extend(f'{name}{{leader="{_escape(s.address)}"}} {getattr(s, attr)}' for s in open_)


def _fsyncs(out: list[str], src: MetricsSources) -> None:
    if src.streams is None:
        return
    runner = src.streams.fsyncs
    _head(
        out,
        "jet_fsyncs_total",
        "counter",
        "Partition fsyncs by where they ran: on the event loop or in a worker thread.",
    )
    out.append(f'jet_fsyncs_total{{place="loop"}} {runner.loop_fsyncs}')
    out.append(f'jet_fsyncs_total{{place="thread"}} {runner.thread_fsyncs}')
    _head(
        out,
        "jet_fsyncs_slow_total",
        "counter",
        "fsyncs on the event loop whose system call, less the loop thread's waits for a CPU,"
        " took over 20 ms (each sends fsyncs to threads for 10 s).",
    )
    out.append(f"jet_fsyncs_slow_total {runner.slow_fsyncs}")
    _head(
        out,
        "jet_fsyncs_waited_total",
        "counter",
        "fsyncs on the event loop over 20 ms by the wall clock only (the loop thread waited"
        " for a CPU, or the time was outside the system call): no back-off.",
    )
    out.append(f"jet_fsyncs_waited_total {runner.waited_fsyncs}")
    _head(
        out,
        "jet_large_writes_total",
        "counter",
        "Appends of 64 KiB or more in a few records, by where they were written.",
    )
    out.append(f'jet_large_writes_total{{place="loop"}} {runner.loop_large_writes}')
    out.append(f'jet_large_writes_total{{place="thread"}} {runner.thread_large_writes}')
    _head(
        out,
        "jet_large_write_loop_seconds_total",
        "counter",
        "Event-loop time spent in large writes made on the loop.",
    )
    out.append(f"jet_large_write_loop_seconds_total {runner.loop_large_write_s:.6f}")


def _files(out: list[str], src: MetricsSources) -> None:
    used, limit = open_files(), open_file_limit()
    if used >= 0:
        _gauge(out, "jet_open_files", "Files (and sockets) the server holds open.", used)
    _gauge(out, "jet_open_files_limit", "The open-file limit (soft RLIMIT_NOFILE).", limit)
    near = 1 if used >= 0 and used >= limit * NEAR_LIMIT_FRACTION else 0
    _gauge(out, "jet_open_files_near_limit", "1 above 80 % of the open-file limit.", near)
    _gauge(
        out,
        "jet_open_sealed_files",
        "Sealed segment files held open by the bounded cache ([storage] open_sealed_files).",
        len(SEALED_FILES),
    )
    _head(
        out,
        "jet_sealed_files_parked_total",
        "counter",
        "Sealed segment files closed by the cache's bound (each reopened on its next read).",
    )
    out.append(f"jet_sealed_files_parked_total {SEALED_FILES.parks}")
    _gauge(
        out,
        "jet_open_active_files",
        "Active segment files held open (their partitions were used since the last sweep).",
        len(ACTIVE_FILES),
    )
    _gauge(
        out,
        "jet_parked_active_files",
        "Active segment files of open partitions closed while idle (reopened on use).",
        ACTIVE_FILES.parked,
    )
    _head(
        out,
        "jet_active_files_parked_total",
        "counter",
        "Active segment files closed while their partitions were idle (each reopened on use).",
    )
    out.append(f"jet_active_files_parked_total {ACTIVE_FILES.parks}")
    if src.streams is not None:
        pending = src.streams.pending
        _gauge(
            out,
            "jet_partitions_unopened",
            "Partitions of a server alone not opened yet (they open after ready, or when asked).",
            len(pending),
        )
        _head(out, "jet_partitions_opened_late_total", "counter", "Partitions opened after ready.")
        out.append(f"jet_partitions_opened_late_total {pending.opened}")
    offline = list(src.streams.offline) if src.streams is not None else []
    _head(
        out,
        "jet_partition_offline",
        "gauge",
        "1 for a partition whose replica here cannot open (see describe's offline reason).",
    )
    for stream, partition in sorted(offline):
        out.append(f'jet_partition_offline{{stream="{_escape(stream)}",partition="{partition}"}} 1')


def _disk(out: list[str], disk: DiskSpace | None) -> None:
    if disk is None:
        return
    disk.sample()  # one statvfs per scrape
    _gauge(
        out,
        "jet_disk_free_bytes",
        "Free bytes of the data directory's file system.",
        disk.free_bytes,
    )
    _gauge(
        out, "jet_disk_size_bytes", "Size of the data directory's file system.", disk.total_bytes
    )
    _gauge(
        out,
        "jet_disk_free_floor_bytes",
        "Client writes are refused below this much free space ([storage] disk_free_floor_bytes).",
        disk.floor_bytes,
    )
    _gauge(
        out,
        "jet_disk_writes_refused",
        "1 while client writes are refused (below the floor).",
        int(disk.refusing),
    )
    _head(
        out,
        "jet_disk_refusals_total",
        "counter",
        "Appends and stream creations refused below the floor.",
    )
    out.append(f"jet_disk_refusals_total {disk.refused_checks}")
    held = disk.reserve.size if disk.reserve.held else 0
    _gauge(
        out,
        "jet_disk_reserve_bytes",
        "Bytes held in reserve for metadata writes on a full disk.",
        held,
    )
    _head(
        out,
        "jet_disk_reserve_releases_total",
        "counter",
        "Times the reserve was released for a metadata write.",
    )
    out.append(f"jet_disk_reserve_releases_total {disk.reserve.releases}")


def _requests(out: list[str], req: RequestMetrics) -> None:
    _head(out, "jet_requests_total", "counter", "Requests answered, by API and error code.")
    for (api, code), n in sorted(req.counts.items()):
        out.append(f'jet_requests_total{{api="{api}",code="{code}"}} {n}')
    _head(
        out,
        "jet_request_duration_seconds",
        "histogram",
        "Time from a request frame decoded to its reply built, by API.",
    )
    for api, hist in sorted(req.latency.items()):
        out.extend(hist.lines("jet_request_duration_seconds", f'api="{api}"'))


def _connections(out: list[str], listener: ProtocolListener | None) -> None:
    if listener is None:
        return
    _gauge(out, "jet_connections", "Client connections open now.", listener.connections)
    _head(out, "jet_connections_accepted_total", "counter", "Client connections accepted.")
    out.append(f"jet_connections_accepted_total {listener.accepted}")
    _head(
        out,
        "jet_connections_refused_total",
        "counter",
        "Client connections refused at accept (limits.max_connections).",
    )
    out.append(f"jet_connections_refused_total {listener.refused}")


def _nats(out: list[str], link: NatsLink | None) -> None:
    connected = 1 if link is not None and link.connected else 0
    _gauge(out, "jet_nats_connected", "1 while the NATS link is connected, else 0.", connected)
    if link is None:
        return
    _head(out, "jet_nats_disconnects_total", "counter", "Times the NATS link was lost.")
    out.append(f"jet_nats_disconnects_total {link.disconnects}")
    _head(out, "jet_nats_reconnects_total", "counter", "Times the NATS link came back.")
    out.append(f"jet_nats_reconnects_total {link.reconnects}")
    _head(
        out,
        "jet_nats_malformed_headers_total",
        "counter",
        "NATS messages with a malformed header block, stored without headers.",
    )
    out.append(f"jet_nats_malformed_headers_total {link.malformed_headers}")
    _head(
        out,
        "jet_nats_handler_errors_total",
        "counter",
        "Received NATS messages whose handling raised (logged, skipped).",
    )
    out.append(f"jet_nats_handler_errors_total {link.handler_errors}")


def _copies(out: list[str], copies: CopyBacklog | None) -> None:
    if copies is None:
        return
    _gauge(
        out,
        "jet_produce_copies_backlog_bytes",
        "Bytes of NATS copies of directly stored records not yet handed to NATS.",
        copies.held,
    )
    _head(
        out,
        "jet_produce_copies_waits_total",
        "counter",
        "Produce requests whose NATS copies waited for room in their backlog.",
    )
    out.append(f"jet_produce_copies_waits_total {copies.waits}")
    _head(
        out,
        "jet_produce_copies_dropped_total",
        "counter",
        "Messages whose NATS copies were dropped: the backlog stayed full until their "
        "request's timeout.",
    )
    out.append(f"jet_produce_copies_dropped_total {copies.dropped}")


def _partitions(out: list[str], src: MetricsSources) -> None:
    streams = src.streams
    if streams is None:
        return
    rows: dict[str, list[str]] = {
        "jet_partition_high_watermark": [],
        "jet_partition_log_end_offset": [],
        "jet_partition_log_start_offset": [],
        "jet_partition_isr_size": [],
        "jet_partition_replicas": [],
        "jet_partition_leader": [],
        "jet_partition_messages_in_total": [],
        "jet_partition_messages_rejected_total": [],
        "jet_partition_produce_direct_total": [],
        "jet_partition_replica_lag_records": [],
        "jet_partition_consumer_lag_records": [],
    }
    positions = src.consumer_positions or {}
    for meta in streams.streams():
        for p in range(meta.spec.partitions):
            replica = streams.local_replica(meta.name, p)
            if replica is None or replica.closed:
                continue
            labels = f'stream="{_escape(meta.name)}",partition="{p}"'
            log = replica.log
            hw, leo = log.high_watermark, log.log_end_offset
            a = meta.partitions[p] if p < len(meta.partitions) else None
            leads = a is None or a.leader == streams.server_id or not streams.clustered
            isr = len(a.isr) if a is not None else 1
            replicas = len(a.replicas) if a is not None else 1
            rows["jet_partition_high_watermark"].append(f"{{{labels}}} {hw}")
            rows["jet_partition_log_end_offset"].append(f"{{{labels}}} {leo}")
            rows["jet_partition_log_start_offset"].append(f"{{{labels}}} {log.log_start_offset}")
            rows["jet_partition_isr_size"].append(f"{{{labels}}} {isr}")
            rows["jet_partition_replicas"].append(f"{{{labels}}} {replicas}")
            rows["jet_partition_leader"].append(f"{{{labels}}} {1 if leads else 0}")
            rows["jet_partition_messages_in_total"].append(f"{{{labels}}} {replica.messages_in}")
            rows["jet_partition_messages_rejected_total"].append(
                f"{{{labels}}} {replica.messages_rejected}"
            )
            rows["jet_partition_produce_direct_total"].append(
                f"{{{labels}}} {replica.produce_direct}"
            )
            state = replica.leader_state
            if state is not None:
                for follower, progress in sorted(state.followers.items()):
                    lag = leo - progress.leo if progress.leo >= 0 else leo
                    rows["jet_partition_replica_lag_records"].append(
                        f'{{{labels},replica="{_escape(follower)}"}} {max(lag, 0)}'
                    )
            position = positions.get((meta.name, p))
            if position is not None:
                rows["jet_partition_consumer_lag_records"].append(
                    f"{{{labels}}} {max(hw - position, 0)}"
                )
    for name, values in rows.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        _head(out, name, kind, _PARTITION_HELP[name])
        out.extend(name + v for v in values)


_PARTITION_HELP = {
    "jet_partition_high_watermark": "First offset not yet committed (local replica).",
    "jet_partition_log_end_offset": "Next offset the local log will assign (LEO).",
    "jet_partition_log_start_offset": "First offset still stored.",
    "jet_partition_isr_size": "Members of the in-sync replica set (1 on a server alone).",
    "jet_partition_replicas": "Replicas of the partition.",
    "jet_partition_leader": "1 if this server leads the partition.",
    "jet_partition_messages_in_total": "Messages appended by this server since start.",
    "jet_partition_messages_rejected_total": "Messages refused (too large, storage errors...).",
    "jet_partition_produce_direct_total": (
        "Produce messages this server queued for appending as their partition's leader "
        "(not through NATS)."
    ),
    "jet_partition_replica_lag_records": "Leader only: LEO minus the follower's LEO.",
    "jet_partition_consumer_lag_records": (
        "HW minus the offset asked by the latest consumer Fetch served here (with one "
        "consumer per partition: its lag; consumer-group offsets live in the group log)."
    ),
}


def _head(out: list[str], name: str, kind: str, text: str) -> None:
    out.append(f"# HELP {name} {text}")
    out.append(f"# TYPE {name} {kind}")


def _gauge(out: list[str], name: str, text: str, value: float) -> None:
    _head(out, name, "gauge", text)
    out.append(f"{name} {_number(value)}")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
