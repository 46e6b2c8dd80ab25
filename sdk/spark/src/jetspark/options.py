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
from typing import Any, Literal

import attrs
import orjson

from jetsdk.codec.error_codes import AckPolicy
from jetspark.errors import OptionError
from jetspark.subjects import pattern_problem, patterns_regex

__all__ = [
    "DEFAULT_ACK_TIMEOUT_S",
    "DEFAULT_FETCH_MAX_BYTES",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "EARLIEST",
    "LATEST",
    "SECURITY_OPTIONS",
    "SINK_OPTIONS",
    "SOURCE_OPTIONS",
    "OffsetSpec",
    "Security",
    "SinkOptions",
    "SourceOptions",
    "parse_offset_spec",
    "security_args",
    "security_options",
    "sink_options",
    "source_options",
]

EARLIEST = -2
"""In a startingOffsets/endingOffsets JSON: the partition's first stored offset."""
LATEST = -1
"""In a startingOffsets/endingOffsets JSON: the partition's high watermark."""
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024
"""Record bytes asked for per Fetch."""
MAX_FETCH_MAX_BYTES = 64 * 1024 * 1024
"""Largest accepted fetchMaxBytes."""
DEFAULT_REQUEST_TIMEOUT_S = 30.0
"""Seconds to wait for one server response."""
DEFAULT_ACK_TIMEOUT_S = 30.0
"""Seconds the server may take to acknowledge a write."""
MAX_MIN_PARTITIONS = 100_000
"""Largest accepted minPartitions."""

OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[int, int]]
"""``"earliest"``, ``"latest"``, or ``{stream: {partition: offset}}`` where an offset may be
:data:`EARLIEST` (-2) or :data:`LATEST` (-1)."""

SECURITY_OPTIONS = (
    "tls",
    "tlsCa",
    "tlsCert",
    "tlsKey",
    "tlsServerHostname",
    "token",
    "user",
    "password",
)
"""Connection options shared by the source and the sinks (TLS and credentials)."""

DEFAULT_MAX_TRIGGER_DELAY_S = 900.0
"""maxTriggerDelay's default, 15 minutes (as Spark's Kafka source)."""
SOURCE_OPTIONS = (
    "servers",
    "streams",
    "streamsPattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "maxRecordsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "includeHeaders",
    "minPartitions",
    "fetchMaxBytes",
    "group",
    "requestTimeout",
    "subjects",
    *SECURITY_OPTIONS,
)
"""Options the source understands (documented names; Spark matches them ignoring case)."""
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

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")


@attrs.frozen
class Security:
    """How to connect: TLS and credentials (secrets never appear in ``repr``)."""

    tls: bool = False
    """Connect with TLS (also on when any of the TLS files is given)."""
    tls_ca: str | None = None
    """PEM CA bundle to verify servers with (default: the system's)."""
    tls_cert: str | None = None
    """PEM client certificate to present (with ``tls_key``)."""
    tls_key: str | None = None
    """PEM key of ``tls_cert``."""
    server_hostname: str | None = None
    """Name checked against server certificates (default: each address's host)."""
    token: str | None = attrs.field(default=None, repr=False)
    """Bearer token (secret)."""
    user: str | None = None
    """User name (with ``password``)."""
    password: str | None = attrs.field(default=None, repr=False)
    """Password of ``user`` (secret)."""

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`jetsdk.Client`."""
        return {
            "tls": True if self.tls else None,
            "tls_ca": self.tls_ca,
            "tls_cert": self.tls_cert,
            "tls_key": self.tls_key,
            "server_hostname": self.server_hostname,
            "token": self.token,
            "user": self.user,
            "password": self.password,
        }


NO_SECURITY = Security()
"""Plain TCP, no credentials."""


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
    precedence over ``starting``."""
    ending_timestamp_ms: int | None = None
    """Batch reads: end before the first record stored at or after this time (ms since the
    epoch); takes precedence over ``ending``."""
    max_records_per_trigger: int | None = None
    """Most offsets per micro-batch (admission control), None for no limit."""
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
            _check_name("streams", name)
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
    if max_records is not None and not streaming:
        raise OptionError("maxRecordsPerTrigger", "only for streaming reads (readStream)")
    group = opts.get("group")
    if group is not None:
        if not streaming:
            raise OptionError("group", "only for streaming reads (readStream)")
        _check_name("group", group)
    min_partitions = _positive_int(opts, "minPartitions")
    if min_partitions is not None and min_partitions > MAX_MIN_PARTITIONS:
        raise OptionError("minPartitions", f"at most {MAX_MIN_PARTITIONS}")
    fetch_max_bytes = _positive_int(opts, "fetchMaxBytes") or DEFAULT_FETCH_MAX_BYTES
    if fetch_max_bytes > MAX_FETCH_MAX_BYTES:
        raise OptionError("fetchMaxBytes", f"at most {MAX_FETCH_MAX_BYTES}")
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
        max_records_per_trigger=max_records,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        min_partitions=min_partitions,
        fetch_max_bytes=fetch_max_bytes,
        group=group,
        request_timeout=_seconds(opts, "requestTimeout", DEFAULT_REQUEST_TIMEOUT_S),
        security=_security(opts),
    )


def sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Parse a sink's options (``df.write`` / ``writeStream`` / foreach_batch_sink).

    Raises:
        OptionError: naming the first bad option.
    """
    opts = _normalize(raw, SINK_OPTIONS)
    stream = opts.get("stream")
    if stream is not None:
        _check_name("stream", stream)
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
        security=_security(opts),
    )


def security_options(raw: Mapping[str, str]) -> Security:
    """Parse only the connection options (:data:`SECURITY_OPTIONS`); others are ignored.

    Raises:
        OptionError: naming the first bad option (never showing a secret's value).
    """
    opts = {k.lower(): str(v) for k, v in raw.items() if k.lower() in _SECURITY_LOWER}
    return _security(opts)


def parse_offset_spec(option: str, text: str) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or ``{"stream": {"0": 12, "1": -2}}``.

    Raises:
        OptionError: anything else (a bad stream name, partition or offset).
    """
    word = text.strip()
    if word.lower() in ("earliest", "latest"):
        return "earliest" if word.lower() == "earliest" else "latest"
    try:
        obj = orjson.loads(word)
    except orjson.JSONDecodeError:
        raise OptionError(
            option, f'{text!r} is neither earliest, latest nor JSON like {{"s": {{"0": 5}}}}'
        ) from None
    if not isinstance(obj, dict) or not obj:
        raise OptionError(option, "JSON must be a non-empty object {stream: {partition: offset}}")
    out: dict[str, dict[int, int]] = {}
    for stream, parts in obj.items():
        _check_name(option, stream)
        if not isinstance(parts, dict) or not parts:
            raise OptionError(option, f"stream {stream!r}: expected a non-empty object")
        out[stream] = {}
        for part, offset in parts.items():
            try:
                number = int(part)
            except ValueError:
                number = -1
            if number < 0 or str(number) != part:
                raise OptionError(option, f"stream {stream!r}: bad partition {part!r}")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise OptionError(
                    option,
                    f"{stream}/{part}: offset {offset!r} must be >= 0, -2 (earliest) or "
                    "-1 (latest)",
                )
            out[stream][number] = offset
    return out


def security_args(
    *,
    tls: bool | None = None,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    server_hostname: str | None = None,
    token: str | None = None,
    user: str | None = None,
    password: str | None = None,
) -> dict[str, str]:
    """The Python keyword arguments of :func:`jetspark.foreach_batch_sink` and the offsets
    helpers as raw options (``tls_ca`` -> ``tlsCa``, ``server_hostname`` ->
    ``tlsServerHostname``; None left out), for :func:`sink_options` or
    :func:`security_options`."""
    raw: dict[str, str] = {}
    if tls is not None:
        raw["tls"] = "true" if tls else "false"
    for option, value in (
        ("tlsCa", tls_ca),
        ("tlsCert", tls_cert),
        ("tlsKey", tls_key),
        ("tlsServerHostname", server_hostname),
        ("token", token),
        ("user", user),
        ("password", password),
    ):
        if value is not None:
            raw[option] = str(value)
    return raw


# -- helpers -------------------------------------------------------------------------------

_SECURITY_LOWER = frozenset(name.lower() for name in SECURITY_OPTIONS)


def _security(opts: Mapping[str, str]) -> Security:
    values: dict[str, str | None] = {}
    for option in SECURITY_OPTIONS[1:]:
        text = opts.get(option.lower())
        if text is not None and not text.strip():
            raise OptionError(option, "must not be empty")
        values[option] = text
    files = [values["tlsCa"], values["tlsCert"], values["tlsKey"]]
    tls_text = opts.get("tls")
    tls = _bool(opts, "tls", False)
    if tls_text is not None and not tls and any(f is not None for f in files):
        raise OptionError("tls", "is false but tlsCa, tlsCert or tlsKey is given")
    tls = tls or any(f is not None for f in files)
    if (values["tlsCert"] is None) != (values["tlsKey"] is None):
        option = "tlsKey" if values["tlsKey"] is None else "tlsCert"
        raise OptionError(option, "tlsCert and tlsKey go together")
    if values["tlsServerHostname"] is not None and not tls:
        raise OptionError("tlsServerHostname", "only with TLS (tls=true or a tls* file)")
    token, user, password = values["token"], values["user"], values["password"]
    if token is not None and (user is not None or password is not None):
        raise OptionError("token", "give either token or user + password, not both")
    if (user is None) != (password is None):
        raise OptionError(
            "password" if password is None else "user", "user and password go together"
        )
    return Security(
        tls=tls,
        tls_ca=values["tlsCa"],
        tls_cert=values["tlsCert"],
        tls_key=values["tlsKey"],
        server_hostname=values["tlsServerHostname"],
        token=token,
        user=user,
        password=password,
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


def _check_name(option: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name.encode()) > 255:
        raise OptionError(option, f"bad name {name!r}")


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


def _bool(opts: Mapping[str, str], option: str, default: bool) -> bool:
    text = opts.get(option.lower())
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise OptionError(option, f"{text!r} is not true or false")


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
