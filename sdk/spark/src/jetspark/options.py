"""The ``jetstream`` format's options, parsed and checked once on the driver.

Spark hands options over as a case-insensitive mapping of strings. :func:`source_options`
and :func:`sink_options` turn it into frozen values (pickled to the executors with the
reader or writer) and raise :class:`~jetspark.errors.OptionError` naming the option for
anything missing, malformed or misspelt. Every option is documented in spec/spark.md.

Pure code: no I/O, no Spark.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from typing import Literal

import attrs

from jetsdk.codec.error_codes import AckPolicy
from jetspark.connection_options import (
    NO_SECURITY,
    SECURITY_OPTIONS,
    Security,
    parse_bool,
    parse_security,
    security_args,
    security_options,
)
from jetspark.errors import OptionError
from jetspark.offset_options import (
    EARLIEST,
    LATEST,
    TIMESTAMP_STRATEGIES,
    OffsetSpec,
    TimestampSpec,
    check_name,
    parse_offset_spec,
    parse_timestamp_spec,
)
from jetspark.subjects import pattern_problem, patterns_regex

__all__ = [
    "DEFAULT_ACK_TIMEOUT_S",
    "DEFAULT_FETCH_MAX_BYTES",
    "DEFAULT_MAX_BYTES_PER_PARTITION",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "EARLIEST",
    "LATEST",
    "NO_SECURITY",
    "SECURITY_OPTIONS",
    "SINK_OPTIONS",
    "SOURCE_OPTIONS",
    "OffsetSpec",
    "Security",
    "SinkOptions",
    "SourceOptions",
    "TimestampSpec",
    "parse_offset_spec",
    "security_args",
    "security_options",
    "sink_options",
    "source_options",
]

DEFAULT_FETCH_MAX_BYTES = 4 * 1024 * 1024
"""Record bytes asked for per Fetch (a server gives at most its max_fetch_bytes, 8 MiB by
default): at 16 KiB values 4 MiB took a third less CPU per MiB than 1 MiB."""
MAX_FETCH_MAX_BYTES = 64 * 1024 * 1024
"""Largest accepted fetchMaxBytes."""
DEFAULT_REQUEST_TIMEOUT_S = 30.0
"""Seconds to wait for one server response."""
DEFAULT_ACK_TIMEOUT_S = 30.0
"""Seconds the server may take to acknowledge a write."""
MAX_MIN_PARTITIONS = 100_000
"""Largest accepted minPartitions."""
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024
"""Estimated stored bytes a Spark partition of the source packs stream-partition ranges up
to (maxBytesPerPartition): a task costs a Python worker call and a connection's round trips
whatever it reads, so small ranges share one. 128 MiB as Spark's
``spark.sql.files.maxPartitionBytes``; on local[2], 10,000 x 16 KiB over 8 partitions took
0.63-0.69 s a batch in 2 Spark partitions against 0.74-1.01 s in 3 (64 MiB)."""

DEFAULT_MAX_TRIGGER_DELAY_S = 900.0
"""maxTriggerDelay's default, 15 minutes (as Spark's Kafka source)."""
SOURCE_OPTIONS = (
    "servers",
    "streams",
    "streamsPattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxRecordsPerTrigger",
    "maxOffsetsPerTrigger",
    "maxBytesPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "includeHeaders",
    "minPartitions",
    "maxBytesPerPartition",
    "fetchMaxBytes",
    "group",
    "requestTimeout",
    "subjects",
    "table",
    *SECURITY_OPTIONS,
)
"""Options the source understands (documented names; Spark matches them ignoring case)."""
TABLE_READ_OPTIONS = frozenset(
    {"servers", "table", "failondataloss", "includeheaders", "fetchmaxbytes", "requesttimeout"}
    | {name.lower() for name in SECURITY_OPTIONS}
)
"""The source options a table read takes (lower case); the others do not apply to it."""
SINK_OPTIONS = (
    "servers",
    "stream",
    "ack",
    "ackTimeout",
    "requestTimeout",
    "sinkName",
    *SECURITY_OPTIONS,
)
"""Options the sinks understand."""
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})


@attrs.frozen
class SourceOptions:
    """The source's options, checked."""

    servers: tuple[str, ...]
    """Bootstrap servers (``host:port``)."""
    streams: tuple[str, ...] = ()
    """Streams to read (empty when ``pattern`` is used)."""
    pattern: str | None = None
    """Regular expression a stream name must match entirely (internal ``__`` streams never
    match)."""
    starting: OffsetSpec = "latest"
    """Where a new query starts."""
    ending: OffsetSpec = "latest"
    """Where a batch read ends (batch reads only)."""
    starting_timestamp_ms: int | None = None
    """Start at the first record stored at or after this time (ms since the epoch); takes
    precedence over ``starting_by_timestamp`` and ``starting``."""
    starting_by_timestamp: TimestampSpec | None = None
    """Per partition, start at the first record stored at or after its time (ms); takes
    precedence over ``starting``."""
    starting_timestamp_strategy: Literal["error", "latest"] = "error"
    """A start by time with no record stored at or after the time: fail the query
    (``error``) or start that partition at its high watermark (``latest``)."""
    ending_timestamp_ms: int | None = None
    """Batch reads: end before the first record stored at or after this time (ms since the
    epoch); takes precedence over ``ending_by_timestamp`` and ``ending``."""
    ending_by_timestamp: TimestampSpec | None = None
    """Batch reads: per partition, end before the first record stored at or after its time
    (the high watermark if none); takes precedence over ``ending``."""
    max_records_per_trigger: int | None = None
    """Most offsets per micro-batch (admission control), None for no limit."""
    max_bytes_per_trigger: int | None = None
    """About this many stored bytes per micro-batch at most (estimated from each
    partition's bytes per offset; a batch always takes at least one offset), None for no
    limit. With ``max_records_per_trigger`` both apply."""
    min_offsets_per_trigger: int | None = None
    """Fewest new offsets for a micro-batch, unless ``max_trigger_delay_s`` passed since the
    last one; None for no minimum."""
    max_trigger_delay_s: float = DEFAULT_MAX_TRIGGER_DELAY_S
    """Longest wait for ``min_offsets_per_trigger`` (seconds)."""
    fail_on_data_loss: bool = True
    """Fail when unread records are gone (retention, deletion); compaction gaps never fail."""
    include_headers: bool = False
    """Add the ``headers`` column."""
    min_partitions: int | None = None
    """Split offset ranges so a batch has at least this many Spark partitions."""
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    """Pack ranges into Spark partitions of about this many estimated bytes at most."""
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    """Record bytes per Fetch request."""
    group: str | None = None
    """Consumer group to mirror processed offsets under (simple commits in ``__groups``,
    spec/groups.md §7.2), None for none."""
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    """Seconds to wait for one server response."""
    security: Security = NO_SECURITY
    """TLS and credentials."""
    subjects: tuple[str, ...] = ()
    """NATS subject patterns (``*``, ``>``) a record's subject must match to be a row;
    empty for every record."""
    table: bool = False
    """A table read (option ``table``): the latest value per key of the one stream in
    :attr:`streams`, a compacted stream (:mod:`jetspark.table`)."""

    def subject_regex(self) -> str | None:
        """:attr:`subjects` as one regular expression over a whole subject, or None."""
        return patterns_regex(self.subjects) if self.subjects else None

    def matches(self, stream: str) -> bool:
        """True if ``stream`` is one of the streams this source reads."""
        if self.pattern is None:
            return stream in self.streams
        return not stream.startswith("__") and re.fullmatch(self.pattern, stream) is not None


@attrs.frozen
class SinkOptions:
    """A sink's options, checked."""

    servers: tuple[str, ...]
    """Bootstrap servers (``host:port``)."""
    stream: str | None = None
    """Target stream; None means every row names its stream in a ``stream`` column."""
    ack: AckPolicy = AckPolicy.ALL
    """Ack policy of every write."""
    ack_timeout: float = DEFAULT_ACK_TIMEOUT_S
    """Seconds the server may take to acknowledge a write."""
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    """Seconds to wait for one server response."""
    sink_name: str | None = None
    """Identity of a streaming sink for exactly-once (default: the query id)."""
    table: bool = False
    """:attr:`stream` is a table (``foreach_batch_sink(table=...)``,
    :mod:`jetspark.table_sink`)."""
    security: Security = NO_SECURITY
    """TLS and credentials."""


def source_options(raw: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Parse the source's options.

    Args:
        raw: the options as Spark passes them (any key case).
        streaming: True for ``readStream`` (startingOffsets defaults to latest and
            endingOffsets is refused), False for ``read`` (earliest .. latest).

    Raises:
        OptionError: naming the first bad option.
    """
    opts = _normalize(raw, SOURCE_OPTIONS)
    servers = _servers(opts)
    if "table" in opts:
        return _table_options(opts, servers, streaming=streaming)
    streams: tuple[str, ...] = ()
    pattern = opts.get("streamspattern")
    if "streams" in opts and pattern is not None:
        raise OptionError("streams", "give either streams or streamsPattern, not both")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError("streamsPattern", f"not a regular expression: {exc}") from None
    elif "streams" in opts:
        streams = tuple(s.strip() for s in opts["streams"].split(",") if s.strip())
        if not streams:
            raise OptionError("streams", "no stream names given")
        for name in streams:
            check_name("streams", name)
        if len(set(streams)) != len(streams):
            raise OptionError("streams", "a stream is listed twice")
    else:
        raise OptionError("streams", "required: a comma-separated list (or use streamsPattern)")

    starting: OffsetSpec = "latest" if streaming else "earliest"
    if "startingoffsets" in opts:
        starting = parse_offset_spec("startingOffsets", opts["startingoffsets"])
    ending: OffsetSpec = "latest"
    if "endingoffsets" in opts:
        if streaming:
            raise OptionError("endingOffsets", "only for batch reads (spark.read)")
        ending = parse_offset_spec("endingOffsets", opts["endingoffsets"])
        if ending == "earliest":
            raise OptionError("endingOffsets", "'earliest' is not a valid end; use latest or JSON")
        if isinstance(ending, dict) and any(
            o == EARLIEST for parts in ending.values() for o in parts.values()
        ):
            raise OptionError("endingOffsets", "-2 (earliest) is not a valid end offset")
    for spec, option in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        if isinstance(spec, dict):
            for stream in spec:
                if pattern is None and stream not in streams:
                    raise OptionError(option, f"stream {stream!r} is not in option 'streams'")
                if pattern is not None and re.fullmatch(pattern, stream) is None:
                    raise OptionError(option, f"stream {stream!r} does not match streamsPattern")

    max_records = _positive_int(opts, "maxRecordsPerTrigger")
    if "maxoffsetspertrigger" in opts:  # Spark's Kafka source's name for it
        if max_records is not None:
            raise OptionError("maxOffsetsPerTrigger", "give maxRecordsPerTrigger or it, not both")
        max_records = _positive_int(opts, "maxOffsetsPerTrigger")
    if max_records is not None and not streaming:
        raise OptionError("maxRecordsPerTrigger", "only for streaming reads (readStream)")
    group = opts.get("group")
    if group is not None:
        if not streaming:
            raise OptionError("group", "only for streaming reads (readStream)")
        check_name("group", group)
    min_partitions = _positive_int(opts, "minPartitions")
    if min_partitions is not None and min_partitions > MAX_MIN_PARTITIONS:
        raise OptionError("minPartitions", f"at most {MAX_MIN_PARTITIONS}")
    fetch_max_bytes = _positive_int(opts, "fetchMaxBytes") or DEFAULT_FETCH_MAX_BYTES
    if fetch_max_bytes > MAX_FETCH_MAX_BYTES:
        raise OptionError("fetchMaxBytes", f"at most {MAX_FETCH_MAX_BYTES}")
    per_partition = _positive_int(opts, "maxBytesPerPartition")
    starting_ts = None
    if "startingtimestamp" in opts:
        starting_ts = _int(opts, "startingTimestamp")
        if starting_ts < 0:
            raise OptionError("startingTimestamp", "must be >= 0 (ms since the epoch)")
    subjects: tuple[str, ...] = ()
    if "subjects" in opts:
        subjects = tuple(p.strip() for p in opts["subjects"].split(",") if p.strip())
        if not subjects:
            raise OptionError("subjects", "no subject patterns given")
        for subject in subjects:
            problem = pattern_problem(subject)
            if problem is not None:
                raise OptionError("subjects", f"bad subject pattern {subject!r}: {problem}")
    min_offsets = _positive_int(opts, "minOffsetsPerTrigger")
    if min_offsets is not None and not streaming:
        raise OptionError("minOffsetsPerTrigger", "only for streaming reads (readStream)")
    delay = DEFAULT_MAX_TRIGGER_DELAY_S
    if "maxtriggerdelay" in opts:
        delay = _duration(opts, "maxTriggerDelay")
    by_time = _by_timestamp(opts, "startingOffsetsByTimestamp", streams, pattern)
    ending_by_time = None
    if "endingoffsetsbytimestamp" in opts:
        if streaming:
            raise OptionError("endingOffsetsByTimestamp", "only for batch reads (spark.read)")
        ending_by_time = _by_timestamp(opts, "endingOffsetsByTimestamp", streams, pattern)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in TIMESTAMP_STRATEGIES:
        raise OptionError(
            "startingOffsetsByTimestampStrategy", f"{strategy!r} is not one of error, latest"
        )
    max_bytes = _positive_int(opts, "maxBytesPerTrigger")
    if max_bytes is not None and not streaming:
        raise OptionError("maxBytesPerTrigger", "only for streaming reads (readStream)")
    ending_ts = None
    if "endingtimestamp" in opts:
        if streaming:
            raise OptionError("endingTimestamp", "only for batch reads (spark.read)")
        ending_ts = _int(opts, "endingTimestamp")
        if ending_ts < 0:
            raise OptionError("endingTimestamp", "must be >= 0 (ms since the epoch)")
    return SourceOptions(
        servers=servers,
        ending_timestamp_ms=ending_ts,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_s=delay,
        streams=streams,
        subjects=subjects,
        pattern=pattern,
        starting=starting,
        ending=ending,
        starting_timestamp_ms=starting_ts,
        starting_by_timestamp=by_time,
        starting_timestamp_strategy="latest" if strategy == "latest" else "error",
        ending_by_timestamp=ending_by_time,
        max_records_per_trigger=max_records,
        max_bytes_per_trigger=max_bytes,
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        include_headers=parse_bool(opts, "includeHeaders", False),
        min_partitions=min_partitions,
        max_bytes_per_partition=per_partition or DEFAULT_MAX_BYTES_PER_PARTITION,
        fetch_max_bytes=fetch_max_bytes,
        group=group,
        request_timeout=_seconds(opts, "requestTimeout", DEFAULT_REQUEST_TIMEOUT_S),
        security=parse_security(opts),
    )


def sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Parse a sink's options (``df.write`` / ``writeStream`` / foreach_batch_sink).

    Raises:
        OptionError: naming the first bad option.
    """
    opts = _normalize(raw, SINK_OPTIONS)
    stream = opts.get("stream")
    if stream is not None:
        check_name("stream", stream)
    ack_text = opts.get("ack", "all").strip().upper()
    try:
        ack = AckPolicy[ack_text]
    except KeyError:
        raise OptionError("ack", f"{ack_text.lower()!r} is not one of all, leader, none") from None
    sink_name = opts.get("sinkname")
    if sink_name is not None and not sink_name.strip():
        raise OptionError("sinkName", "must not be empty")
    return SinkOptions(
        servers=_servers(opts),
        stream=stream,
        ack=ack,
        ack_timeout=_seconds(opts, "ackTimeout", DEFAULT_ACK_TIMEOUT_S),
        request_timeout=_seconds(opts, "requestTimeout", DEFAULT_REQUEST_TIMEOUT_S),
        sink_name=sink_name,
        security=parse_security(opts),
    )


# -- helpers -------------------------------------------------------------------------------


def _table_options(
    opts: Mapping[str, str], servers: tuple[str, ...], *, streaming: bool
) -> SourceOptions:
    """Option ``table``: a batch read of one compacted stream's latest value per key."""
    if streaming:
        raise OptionError("table", "only for batch reads (spark.read): a table is a static view")
    name = opts["table"].strip()
    check_name("table", name)
    by_lower = {o.lower(): o for o in SOURCE_OPTIONS}
    extra = sorted(set(opts) - TABLE_READ_OPTIONS)
    if extra:
        raise OptionError(
            by_lower[extra[0]],
            "does not apply to a table read (option 'table': every partition's latest value "
            "per key, read whole)",
        )
    fetch_max_bytes = _positive_int(opts, "fetchMaxBytes") or DEFAULT_FETCH_MAX_BYTES
    if fetch_max_bytes > MAX_FETCH_MAX_BYTES:
        raise OptionError("fetchMaxBytes", f"at most {MAX_FETCH_MAX_BYTES}")
    return SourceOptions(
        servers=servers,
        streams=(name,),
        starting="earliest",
        ending="latest",
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        include_headers=parse_bool(opts, "includeHeaders", False),
        fetch_max_bytes=fetch_max_bytes,
        request_timeout=_seconds(opts, "requestTimeout", DEFAULT_REQUEST_TIMEOUT_S),
        security=parse_security(opts),
        table=True,
    )


def _normalize(raw: Mapping[str, str], known: tuple[str, ...]) -> dict[str, str]:
    by_lower = {name.lower(): name for name in known}
    out: dict[str, str] = {}
    for key, value in raw.items():
        lower = key.lower()
        if lower in by_lower:
            out[lower] = str(value)
            continue
        if lower in _SPARK_OPTIONS:
            continue
        # Unknown options are ignored unless they look like a misspelt one of ours: a typo
        # must not silently fall back to a default.
        close = difflib.get_close_matches(lower, list(by_lower), n=1, cutoff=0.75)
        if close:
            raise OptionError(key, f"unknown option; did you mean {by_lower[close[0]]!r}?")
    return out


def _servers(opts: Mapping[str, str]) -> tuple[str, ...]:
    text = opts.get("servers") or os.environ.get("JET_SERVERS", "")
    servers = tuple(s.strip() for s in text.split(",") if s.strip())
    if not servers:
        raise OptionError("servers", "required: comma-separated host:port list")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError("servers", f"{server!r} is not host:port")
    return servers


def _by_timestamp(
    opts: Mapping[str, str], option: str, streams: tuple[str, ...], pattern: str | None
) -> TimestampSpec | None:
    """Option ``option`` (JSON of times per partition) checked against the streams read,
    or None when it is not given."""
    text = opts.get(option.lower())
    if text is None:
        return None
    spec = parse_timestamp_spec(option, text)
    for stream in spec:
        if pattern is None and stream not in streams:
            raise OptionError(option, f"stream {stream!r} is not in option 'streams'")
        if pattern is not None and re.fullmatch(pattern, stream) is None:
            raise OptionError(option, f"stream {stream!r} does not match streamsPattern")
    return spec


def _int(opts: Mapping[str, str], option: str) -> int:
    text = opts[option.lower()].strip()
    try:
        return int(text)
    except ValueError:
        raise OptionError(option, f"{text!r} is not an integer") from None


def _positive_int(opts: Mapping[str, str], option: str) -> int | None:
    if option.lower() not in opts:
        return None
    value = _int(opts, option)
    if value < 1:
        raise OptionError(option, f"must be >= 1, got {value}")
    return value


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$", re.IGNORECASE)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _duration(opts: Mapping[str, str], option: str) -> float:
    """Seconds from a duration such as ``15m``, ``30s``, ``500ms`` (no unit: seconds)."""
    text = opts[option.lower()]
    found = _DURATION_RE.match(text)
    if found is None:
        raise OptionError(option, f"{text!r} is not a duration (like 15m, 30s, 500ms)")
    return float(found.group(1)) * _UNIT_S[(found.group(2) or "s").lower()]


def _seconds(opts: Mapping[str, str], option: str, default: float) -> float:
    text = opts.get(option.lower())
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise OptionError(option, f"{text!r} is not a number of seconds") from None
    if not value > 0 or value > 86_400:
        raise OptionError(option, f"must be > 0 and <= 86400 seconds, got {text}")
    return value
