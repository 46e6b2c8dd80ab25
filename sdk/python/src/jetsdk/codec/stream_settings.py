"""Named limits of a stream's settings and their one checker (spec/protocol.md,
"Stream settings").

Pure, no I/O. The server checks every CreateStream body with :func:`check_settings`
(and adds what only it knows: the cluster's size, its own message limit, subject syntax);
the SDK checks its ``create_stream`` arguments with the same function before sending, so
both refuse a bad value with the same field name and message. :func:`repair_stored`
brings settings written by an older version back within the limits when metadata is read.

Types follow JSON: an integer setting takes a JSON integer only (not ``1.0``, not ``true``,
not ``"1"``); a ``*_s`` setting takes a finite number of seconds; ``null`` means "the
default" for every setting. Every duration fits a signed 64-bit count of nanoseconds when
added to or subtracted from a current timestamp (:data:`MAX_DURATION_S`), and every size
or count fits a signed 64-bit integer, so no derived runtime value can overflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from jetsdk.codec.errors import CodecError
from jetsdk.codec.limits import MAX_VALUE_BYTES

MAX_PARTITIONS = 1024
"""Most partitions of one stream."""
MAX_REPLICATION_FACTOR = 255
"""Largest replication factor a request may name (a server also refuses one above the
size of its cluster)."""
MIN_SEGMENT_MAX_BYTES = 1024
"""Smallest ``segment_max_bytes``."""
MAX_SEGMENT_MAX_BYTES = 2**31 - 1
"""Largest ``segment_max_bytes``: index positions are u32 and one batch may overshoot the
roll size (spec/storage.md §3, §12)."""
MAX_DURATION_S = 3_155_760_000.0
"""Largest duration setting, in seconds (100 years of 365.25 days): ``now_ns`` plus or
minus it in nanoseconds stays within a signed 64-bit integer until well past 2200."""
MAX_COUNT = 2**63 - 1
"""Largest ``retention_max_bytes`` and ``retention_max_messages`` (a signed 64-bit
integer)."""
MAX_STREAM_MESSAGE_BYTES = MAX_VALUE_BYTES
"""Largest ``max_message_bytes`` a stream may set (a server also refuses one above its
own ``limits.max_message_bytes``)."""

DEFAULT_DUPLICATE_WINDOW_S = 120.0
"""How long a plain message's ``Nats-Msg-Id`` is remembered (JetStream's default)."""
DEFAULT_SEGMENT_MAX_BYTES = 256 * 1024 * 1024
"""Roll the active segment once appending would take it past this size."""
DEFAULT_SEGMENT_MAX_AGE_S = 7 * 24 * 3600.0
"""Roll the active segment once a new record is this much newer than its first one."""
DEFAULT_DELETE_RETENTION_S = 86400.0
"""How long compaction keeps a tombstone after its timestamp."""

DURABILITY_FLUSHED = "flushed"
"""Commit = fsynced on every in-sync replica (the default)."""
DURABILITY_REPLICATED = "replicated"
"""Commit = written (not necessarily fsynced) on every in-sync replica."""
DURABILITY_WRITTEN = "written"
"""Commit = written (not necessarily fsynced) on the leader, which is the only replica
(replication factor 1 only): consumers see records before they are fsynced, as with
Kafka's and JetStream's defaults; a power loss or a failed fsync can lose what was acked
in the last fsync window (spec/cluster.md, "Durability")."""
DURABILITIES = (DURABILITY_FLUSHED, DURABILITY_REPLICATED, DURABILITY_WRITTEN)
"""The values of ``durability`` (spec/cluster.md, "Durability settings")."""

INT_SETTINGS: Mapping[str, tuple[int, int]] = {
    "partitions": (1, MAX_PARTITIONS),
    "replication_factor": (1, MAX_REPLICATION_FACTOR),
    "min_isr": (1, MAX_REPLICATION_FACTOR),
    "segment_max_bytes": (MIN_SEGMENT_MAX_BYTES, MAX_SEGMENT_MAX_BYTES),
    "retention_max_bytes": (1, MAX_COUNT),
    "retention_max_messages": (1, MAX_COUNT),
    "max_message_bytes": (1, MAX_STREAM_MESSAGE_BYTES),
}
"""Integer settings -> inclusive (min, max)."""

SECONDS_SETTINGS: Mapping[str, bool] = {
    "segment_max_age_s": False,
    "retention_max_age_s": False,
    "delete_retention_s": True,
    "duplicate_window_s": True,
}
"""Duration settings (seconds, at most :data:`MAX_DURATION_S`) -> whether 0 is allowed
(else the value must be > 0)."""

BOOL_SETTINGS = ("compact", "internal", "no_nats_copies")
"""Boolean settings (default false)."""

NO_NATS_COPIES = "no_nats_copies"
"""True: the records a one-replica stream's leader stores directly from a Produce request
are not republished to NATS (no live subscriber and no other stream on the subject sees
them; spec/protocol.md §6). Replication factor 1 and no ``group`` only
(:func:`check_no_nats_copies`)."""

REQUEST_FIELDS = frozenset(
    {"name", "subject", "group", "durability", "op_id", "forwarded"}
    | set(INT_SETTINGS)
    | set(SECONDS_SETTINGS)
    | set(BOOL_SETTINGS)
)
"""Every key a CreateStream body may hold; any other key is refused (a misspelt setting
must not be silently ignored)."""


class SettingError(CodecError):
    """A stream setting outside its limits or of the wrong type.

    Attributes:
        field: the setting's name (the request key).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, reason="setting")
        self.field = field


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_int(field: str, value: object, minimum: int, maximum: int) -> int:
    """``value`` as an integer in ``[minimum, maximum]``.

    Raises:
        SettingError: not a JSON integer (bool and float refused), or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingError(field, f"{field} must be an integer, got {_describe(value)}")
    if not minimum <= value <= maximum:
        raise SettingError(
            field, f"{field} must be within {minimum}..{maximum}, got {_describe(value)}"
        )
    return value


def check_seconds(field: str, value: object, *, allow_zero: bool) -> float:
    """``value`` as float seconds in ``[0 or >0, MAX_DURATION_S]``.

    Raises:
        SettingError: not a number (bool refused), NaN, infinite, negative, zero where it
            must be positive, or above :data:`MAX_DURATION_S`.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SettingError(field, f"{field} must be a number of seconds, got {_describe(value)}")
    low = ">= 0" if allow_zero else "> 0"
    if isinstance(value, float) and not math.isfinite(value):
        raise SettingError(field, f"{field} must be a finite number of seconds, got {value}")
    if value < 0 or (value == 0 and not allow_zero) or value > MAX_DURATION_S:
        raise SettingError(
            field,
            f"{field} must be {low} and at most {MAX_DURATION_S:.0f} seconds (100 years), "
            f"got {_describe(value)}",
        )
    return float(value)


def check_bool(field: str, value: object) -> bool:
    """``value`` as a bool (null: false).

    Raises:
        SettingError: anything but true, false or null.
    """
    if value is None:
        return False
    if not isinstance(value, bool):
        raise SettingError(field, f"{field} must be true or false, got {_describe(value)}")
    return value


def check_durability(value: object, replication_factor: int) -> str:
    """``value`` as a durability (null: ``flushed``).

    Raises:
        SettingError: not one of :data:`DURABILITIES`, or ``written`` with replicas.
    """
    if value is None:
        return DURABILITY_FLUSHED
    if not isinstance(value, str) or value not in DURABILITIES:
        raise SettingError(
            "durability",
            f"durability must be one of {', '.join(DURABILITIES)}, got {_describe(value)}",
        )
    if value == DURABILITY_WRITTEN and replication_factor != 1:
        raise SettingError(
            "durability",
            f"durability {DURABILITY_WRITTEN!r} needs replication_factor 1 (got "
            f"{replication_factor}): with replicas use 'replicated' (written on every ISR "
            "member, fsynced on the leader)",
        )
    return value


def check_no_nats_copies(on: bool, replication_factor: int, group: object) -> None:
    """``no_nats_copies`` needs one replica and no load-balance group.

    Raises:
        SettingError: it is on with a replication factor above 1 (the unmarked NATS
            copies of a replicated partition's ALL requests carry failover: a new leader
            stores them) or with a ``group`` (whose Produce requests go through NATS).
    """
    if not on:
        return
    if replication_factor != 1:
        raise SettingError(
            NO_NATS_COPIES,
            f"{NO_NATS_COPIES} needs replication_factor 1 (got {replication_factor}): a "
            "replicated partition's NATS copies carry failover",
        )
    if group is not None:
        raise SettingError(
            NO_NATS_COPIES,
            f"{NO_NATS_COPIES} needs a stream without group: a group's messages go through NATS",
        )


def default_min_isr(replication_factor: int) -> int:
    """The default minimum ISR: 2 when the replication factor is 3 or more, else 1."""
    return 2 if replication_factor >= 3 else 1


def check_settings(req: Mapping[str, Any]) -> dict[str, Any]:
    """Check every setting of a CreateStream body against its named limits.

    Returns the numeric, boolean and durability settings with their defaults filled in
    (``min_isr`` resolved; optional limits and ``max_message_bytes`` None when absent;
    ``segment_max_bytes`` / ``segment_max_age_s`` None when absent: the server's defaults
    apply). Name, subject and group syntax are the server's (and ``max_message_bytes``
    against its own limit, ``replication_factor`` against its cluster).

    Raises:
        SettingError: the first bad setting found: an unknown key, then the integer
            settings, the durations, the booleans, ``min_isr`` against the replication
            factor, ``durability``.
    """
    for key in req:
        if key not in REQUEST_FIELDS:
            raise SettingError(key, f"unknown setting {_describe(key)} (see spec/protocol.md)")
    out: dict[str, Any] = {}
    for field, (minimum, maximum) in INT_SETTINGS.items():
        value = req.get(field)
        out[field] = None if value is None else check_int(field, value, minimum, maximum)
    for field, allow_zero in SECONDS_SETTINGS.items():
        value = req.get(field)
        out[field] = None if value is None else check_seconds(field, value, allow_zero=allow_zero)
    for field in BOOL_SETTINGS:
        out[field] = check_bool(field, req.get(field))
    rf = out["replication_factor"] = out["replication_factor"] or 1
    out["partitions"] = out["partitions"] or 1
    if out["min_isr"] is None:
        out["min_isr"] = default_min_isr(rf)
    elif out["min_isr"] > rf:
        raise SettingError(
            "min_isr",
            f"min_isr must be within 1..{rf} (the replication factor), got {out['min_isr']}",
        )
    out["durability"] = check_durability(req.get("durability"), rf)
    check_no_nats_copies(out[NO_NATS_COPIES], rf, req.get("group"))
    if out["delete_retention_s"] is None:
        out["delete_retention_s"] = DEFAULT_DELETE_RETENTION_S
    if out["duplicate_window_s"] is None:
        out["duplicate_window_s"] = DEFAULT_DUPLICATE_WINDOW_S
    return out


_STRUCTURAL = ("partitions", "replication_factor")
"""Never repaired: they shape the stream's assignments (and were always bounded)."""

_STORED_DEFAULTS: Mapping[str, Any] = {
    "min_isr": 1,
    "segment_max_bytes": DEFAULT_SEGMENT_MAX_BYTES,
    "segment_max_age_s": DEFAULT_SEGMENT_MAX_AGE_S,
    "delete_retention_s": DEFAULT_DELETE_RETENTION_S,
    "duplicate_window_s": DEFAULT_DUPLICATE_WINDOW_S,
}
"""What a stored setting of the wrong type becomes; absent here: None (no limit)."""


def repair_stored(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Settings read from metadata (a stream spec's JSON), brought within the limits.

    Metadata written by an older version may hold values it accepted and these limits
    refuse (say a ``duplicate_window_s`` of 1e300). Refusing the stream would make its
    data unreadable, so each such value is clamped to its nearest limit (a wrong type
    becomes the default, or no limit for an optional one: never a limit that deletes
    more), and every change is described in the returned list for the caller to log.
    ``partitions`` and ``replication_factor`` are left alone: they shape the stream's
    assignments and were always bounded. Deterministic, so every member of a cluster
    repairs the same way.
    """
    out = dict(data)
    notes: list[str] = []

    def fix(field: str, new: Any) -> None:
        notes.append(f"{field}: stored value {_describe(data.get(field))} is now {new!r}")
        out[field] = new

    for field, (minimum, maximum) in INT_SETTINGS.items():
        value = data.get(field)
        if field in _STRUCTURAL or (value is None and field not in _STORED_DEFAULTS):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            if field in data:
                fix(field, _STORED_DEFAULTS.get(field))
        elif not minimum <= value <= maximum:
            fix(field, min(max(value, minimum), maximum))
    for field, allow_zero in SECONDS_SETTINGS.items():
        value = data.get(field)
        if value is None and field not in _STORED_DEFAULTS:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (isinstance(value, float) and math.isnan(value))
            or value < 0
            or (value == 0 and not allow_zero)
        ):
            if field in data:
                fix(field, _STORED_DEFAULTS.get(field))
        elif value > MAX_DURATION_S:
            fix(field, MAX_DURATION_S)
    rf = out.get("replication_factor", 1)
    min_isr = out.get("min_isr", 1)
    if isinstance(rf, int) and isinstance(min_isr, int) and min_isr > rf:
        fix("min_isr", rf)
    durability = data.get("durability", DURABILITY_FLUSHED)
    if durability not in DURABILITIES or (durability == DURABILITY_WRITTEN and rf != 1):
        fix("durability", DURABILITY_FLUSHED)
    for field in BOOL_SETTINGS:
        if field in data and not isinstance(data[field], bool):
            fix(field, False)
    if out.get(NO_NATS_COPIES) is True and (rf != 1 or out.get("group") is not None):
        fix(NO_NATS_COPIES, False)
    return out, notes


UPDATABLE_SETTINGS = (
    "retention_max_age_s",
    "retention_max_bytes",
    "retention_max_messages",
    "segment_max_bytes",
    "segment_max_age_s",
    "delete_retention_s",
    "max_message_bytes",
    NO_NATS_COPIES,
)
"""Settings an UpdateStream may change on an existing stream: the storage settings every
replica applies to its open logs (retention, segment rolling, tombstone expiry), the
largest message its replicas store from then on (records already stored stay), and
whether the records of Produce requests answered from then on are copied to NATS."""
OPTIONAL_LIMITS = ("retention_max_age_s", "retention_max_bytes", "retention_max_messages")
"""Updatable settings that null turns off (no limit)."""
NULLABLE_UPDATES = (*OPTIONAL_LIMITS, "max_message_bytes")
"""Updatable settings an UpdateStream may set to null: the optional limits (no limit) and
``max_message_bytes`` (the server's ``limits.max_message_bytes``)."""
FIXED_SETTINGS = frozenset(REQUEST_FIELDS - set(UPDATABLE_SETTINGS) - {"op_id", "forwarded"})
"""Settings an existing stream keeps: its name and subjects, its shape (``partitions``,
``replication_factor``), and what its running replicas hold (compaction on or off, the
ack rules, ``duplicate_window_s``)."""


def check_update(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Check the settings of an UpdateStream body (``settings``) against the same named
    limits as :func:`check_settings`; return them checked (ints, float seconds).

    Raises:
        SettingError: a setting that cannot change (:data:`FIXED_SETTINGS`: ``field``
            names it), an unknown one, null for a setting that is not an optional limit,
            or a value outside its limits.
    """
    out: dict[str, Any] = {}
    for field, value in changes.items():
        if field in FIXED_SETTINGS:
            raise SettingError(
                field,
                f"{field} cannot change on an existing stream (updatable: "
                f"{', '.join(UPDATABLE_SETTINGS)})",
            )
        if field not in UPDATABLE_SETTINGS:
            raise SettingError(field, f"unknown setting {_describe(field)} (see spec/protocol.md)")
        if value is None:
            if field not in NULLABLE_UPDATES:
                raise SettingError(field, f"{field} needs a value (only limits can be null)")
            out[field] = None
        elif field in BOOL_SETTINGS:
            out[field] = check_bool(field, value)
        elif field in INT_SETTINGS:
            out[field] = check_int(field, value, *INT_SETTINGS[field])
        else:
            out[field] = check_seconds(field, value, allow_zero=SECONDS_SETTINGS[field])
    return out
