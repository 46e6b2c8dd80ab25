"""Records of a share log (spec/share-groups.md, "Records"): value types and their JSON.

A share group's log is the internal stream ``__share.<group>`` (one partition). Its records:

======== =================================================================================
claim    take a lease on an offset range of a consumed partition (creating the range at SPEO)
settle   the lease holder's outcomes: acked, released (nack), returned (never handed out),
         rejected, dead, extend
settings the group's lease length and delivery limit (v2)
======== =================================================================================

Validation is part of the protocol: a record that breaks a rule is skipped by every reader
(:class:`InvalidShareRecord`); a newer version raises :class:`UnsupportedShareVersion`, which a
reader must not skip. Pure code: no I/O. Values are immutable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs
import orjson

from jetsdk.errors import InvalidArgument, JetError

__all__ = [
    "MAX_DELIVERIES_LIMIT",
    "MAX_LEASE_MS",
    "MAX_RANGE",
    "RECORD_VERSION",
    "SHARE_STREAM_PREFIX",
    "SHARE_SUBJECT_PREFIX",
    "Claim",
    "InvalidShareRecord",
    "Run",
    "Settings",
    "Settle",
    "ShareRecord",
    "UnsupportedShareVersion",
    "decode_share_record",
    "encode_share_record",
    "runs_of",
    "share_record_group",
    "share_stream_name",
    "share_subject",
]

RECORD_VERSION = 2
"""The version this module writes and the highest it reads (1 has no ``returned`` and no
``size`` on a claim of an existing range; spec §3)."""
SHARE_STREAM_PREFIX = "__share."
"""A group's share log is the internal stream ``__share.<group>``."""
SHARE_SUBJECT_PREFIX = "_jet.share."
"""... listening on ``_jet.share.<group>``."""
MAX_RANGE = 100_000
"""Most offsets in one range."""
MAX_LEASE_MS = 86_400_000
"""Longest lease (one day)."""
MAX_DELIVERIES_LIMIT = 1_000_000
"""Largest ``max_deliveries``."""
_MAX_OFFSET = 2**63 - 1
_MAX_ID_BYTES = 255
_GROUP_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_MAX_RECORD_BYTES = 16 * 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Run = tuple[int, int]
"""A half-open run of offsets ``[a, b)``."""


class InvalidShareRecord(JetError, ValueError):
    """A share-log record every reader skips (it breaks a validation rule); not retriable."""


class UnsupportedShareVersion(JetError, ValueError):
    """A record of a newer version: the reader must stop (skipping it would split views)."""


def share_stream_name(group: str) -> str:
    """The share log's stream name for ``group``.

    Raises:
        InvalidArgument: not a valid group name (1..200 of ``[A-Za-z0-9_.-]``; a
            ValueError too).
    """
    if not _GROUP_NAME.match(group):
        raise InvalidArgument(
            f"share group name must be 1..200 of [A-Za-z0-9_.-], not {group!r}",
            details={"field": "group"},
        )
    return SHARE_STREAM_PREFIX + group


def share_subject(group: str) -> str:
    """The share log's subject for ``group``."""
    share_stream_name(group)
    return SHARE_SUBJECT_PREFIX + group


def runs_of(offsets: Sequence[int] | set[int]) -> list[Run]:
    """Sorted half-open runs covering exactly ``offsets``."""
    out: list[list[int]] = []
    for o in sorted(set(offsets)):
        if out and out[-1][1] == o:
            out[-1][1] = o + 1
        else:
            out.append([o, o + 1])
    return [(a, b) for a, b in out]


@attrs.frozen
class Claim:
    """Take a lease on the range starting at ``start``, or (``start`` None) on a new range of
    up to ``size`` offsets at the partition's SPEO, below ``end`` (spec §3.1). On an existing
    range, ``size`` (if set) is the most offsets acquired for delivery."""

    group: str
    member: str
    stream: str
    partition: int
    start: int | None
    end: int
    lease_ms: int
    max_deliveries: int
    dlq_hw: int | None = None
    size: int | None = None


@attrs.frozen
class Settle:
    """The lease holder's outcomes for offsets of its lease (spec §3.2)."""

    group: str
    member: str
    stream: str
    partition: int
    start: int
    lease: int
    acked: tuple[Run, ...] = ()
    released: tuple[tuple[int, int], ...] = ()
    rejected: tuple[Run, ...] = ()
    dead: tuple[Run, ...] = ()
    extend: bool = False
    dlq_hw: int | None = None
    returned: tuple[Run, ...] = ()
    """Acquired offsets given back that were never handed to the application: available
    again at once, and this lease's delivery does not count (spec §7)."""
    renew: tuple[Run, ...] = ()
    """Offsets still being worked on: each gets a deadline of its own, a lease length from
    this record's time (per-message in progress)."""


@attrs.frozen
class Settings:
    """The group's settings (spec §3.3): the latest in the log applies to every claim."""

    group: str
    member: str
    lease_ms: int
    max_deliveries: int
    starts: tuple[tuple[str, int, int], ...] = ()
    """(stream, partition, offset): where a partition the group has no state for starts."""


ShareRecord = Claim | Settle | Settings


_ENCODED: dict[type, tuple[str, tuple[str, ...]]] = {
    Settings: ("settings", ("group", "member", "lease_ms", "max_deliveries", "starts")),
    Claim: (
        "claim",
        (
            "group",
            "member",
            "stream",
            "partition",
            "start",
            "end",
            "size",
            "lease_ms",
            "max_deliveries",
            "dlq_hw",
        ),
    ),
    Settle: ("settle", ("group", "member", "stream", "partition", "start", "lease")),
}
"""Record class -> (its ``type``, the fields it always has, in spec order)."""
_SETTLE_SPARSE = ("acked", "released", "returned", "rejected", "dead", "extend", "renew", "dlq_hw")
"""A settle's fields after the ones it always has, each left out when empty, false or null
(spec §3.2): most settles hold acks only."""


def encode_share_record(record: ShareRecord) -> bytes:
    """The canonical JSON value of ``record`` (fields in spec order)."""
    kind, fields = _ENCODED[type(record)]
    head: dict[str, Any] = {"v": RECORD_VERSION, "type": kind}
    for name in fields:
        head[name] = getattr(record, name)
    if isinstance(record, Settle):
        for name in _SETTLE_SPARSE:
            value = getattr(record, name)
            if value is not None and value is not False and value != ():
                head[name] = value
    return orjson.dumps(head)


def _bad(text: str) -> InvalidShareRecord:
    return InvalidShareRecord(text)


def _int(obj: dict[str, Any], name: str, low: int = 0, high: int = _MAX_OFFSET) -> int:
    value = obj.get(name)
    if type(value) is not int or not low <= value <= high:
        raise _bad(f"{name} must be an integer in {low}..{high}")
    return value


def _opt_int(obj: dict[str, Any], name: str) -> int | None:
    return None if obj.get(name) is None else _int(obj, name)


def _ident(obj: dict[str, Any], name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str) or not value:
        raise _bad(f"{name} must be a non-empty string")
    if (len(value) > _MAX_ID_BYTES // 4 and len(value.encode("utf-8")) > _MAX_ID_BYTES) or (
        _CONTROL.search(value) is not None
    ):
        raise _bad(f"{name} is too long or has control characters")
    return value


def _pairs(obj: dict[str, Any], name: str, *, runs: bool) -> tuple[tuple[int, int], ...]:
    raw = obj.get(name, [])
    if not isinstance(raw, list) or len(raw) > MAX_RANGE:
        raise _bad(f"{name} must be a list of at most {MAX_RANGE} pairs")
    out: list[tuple[int, int]] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2):
            raise _bad(f"{name} entries are [a, b] pairs")
        a, b = item
        if type(a) is not int or type(b) is not int or not 0 <= a <= _MAX_OFFSET:
            raise _bad(f"{name} entries are integers")
        if not 0 <= b <= _MAX_OFFSET or (runs and b <= a):
            raise _bad(f"{name} entry {item} is out of range")
        out.append((a, b))
    return tuple(out)


def share_record_group(value: bytes | memoryview) -> str | None:
    """The ``group`` field of a share-log value, whatever else it holds (None: not a JSON
    object with a string ``group``)."""
    if len(value) > _MAX_RECORD_BYTES:
        return None
    try:
        obj = orjson.loads(bytes(value))
    except orjson.JSONDecodeError:
        return None
    group = obj.get("group") if isinstance(obj, dict) else None
    return group if isinstance(group, str) else None


def _starts(obj: dict[str, Any]) -> tuple[tuple[str, int, int], ...]:
    raw = obj.get("starts", [])
    if not isinstance(raw, list) or len(raw) > MAX_RANGE:
        raise _bad(f"starts must be a list of at most {MAX_RANGE} entries")
    out: list[tuple[str, int, int]] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 3):
            raise _bad("starts entries are [stream, partition, offset]")
        entry = {"stream": item[0], "partition": item[1], "offset": item[2]}
        stream = _ident(entry, "stream")
        out.append((stream, _int(entry, "partition", 0, 65535), _int(entry, "offset")))
    return tuple(out)


def decode_share_record(value: bytes | memoryview) -> ShareRecord:
    """Decode and validate a share-log record value.

    Raises:
        InvalidShareRecord: it breaks a rule (every reader skips it).
        UnsupportedShareVersion: a newer version (the reader must stop).
    """
    if len(value) > _MAX_RECORD_BYTES:
        raise _bad("record too large")
    try:
        obj = orjson.loads(bytes(value))
    except orjson.JSONDecodeError as exc:
        raise _bad(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _bad("not a JSON object")
    version = obj.get("v")
    if type(version) is not int or version < 1:
        raise _bad("v must be an integer >= 1")
    if version > RECORD_VERSION:
        raise UnsupportedShareVersion(f"share record version {version} > {RECORD_VERSION}")
    kind = obj.get("type")
    group, member = _ident(obj, "group"), _ident(obj, "member")
    if kind == "settings" and version >= 2:
        return Settings(
            group=group,
            member=member,
            lease_ms=_int(obj, "lease_ms", 1, MAX_LEASE_MS),
            max_deliveries=_int(obj, "max_deliveries", 1, MAX_DELIVERIES_LIMIT),
            starts=_starts(obj),
        )
    stream = _ident(obj, "stream")
    partition = _int(obj, "partition", 0, 65535)
    dlq_hw = _opt_int(obj, "dlq_hw")
    if kind == "claim":
        end = _int(obj, "end")
        claim_start = _opt_int(obj, "start")
        # size 0 (a claim of an existing range for its dead letters only) needs a start.
        size = None if obj.get("size") is None else _int(obj, "size", 0, MAX_RANGE)
        if claim_start is None:
            if size == 0:
                raise _bad("a claim at SPEO needs a size of at least 1")
            if size is None:
                raise _bad("a claim at SPEO (start null) needs a size")
        elif not claim_start < end <= claim_start + MAX_RANGE:
            raise _bad(f"range [{claim_start}, {end}) is empty or longer than {MAX_RANGE}")
        return Claim(
            group=group,
            member=member,
            stream=stream,
            partition=partition,
            start=claim_start,
            end=end,
            lease_ms=_int(obj, "lease_ms", 1, MAX_LEASE_MS),
            max_deliveries=_int(obj, "max_deliveries", 1, MAX_DELIVERIES_LIMIT),
            dlq_hw=dlq_hw,
            size=size,
        )
    if kind == "settle":
        start = _int(obj, "start")
        extend = obj.get("extend", False)
        if not isinstance(extend, bool):
            raise _bad("extend must be a boolean")
        return Settle(
            group=group,
            member=member,
            stream=stream,
            partition=partition,
            start=start,
            lease=_int(obj, "lease"),
            acked=_pairs(obj, "acked", runs=True),
            released=_pairs(obj, "released", runs=False),
            returned=_pairs(obj, "returned", runs=True),
            rejected=_pairs(obj, "rejected", runs=True),
            dead=_pairs(obj, "dead", runs=True),
            extend=extend,
            dlq_hw=dlq_hw,
            renew=_pairs(obj, "renew", runs=True),
        )
    raise _bad(f"unknown record type {kind!r}")
