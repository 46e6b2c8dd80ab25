"""Validation of stream names, subjects and CreateStream requests (spec/protocol.md).

Every check raises :class:`~jetserver.errors.ApiError` INVALID_ARGUMENT naming the field,
with a message that says what is allowed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from jetsdk.codec.limits import MAX_SUBJECT_BYTES, MAX_VALUE_BYTES
from jetserver.errors import invalid_argument
from jetserver.metadata.model import (
    DEFAULT_DUPLICATE_WINDOW_S,
    DURABILITIES,
    DURABILITY_FLUSHED,
    DURABILITY_WRITTEN,
    StreamSpec,
)
from jetserver.storage.config import (
    DEFAULT_DELETE_RETENTION_S,
    DEFAULT_SEGMENT_MAX_AGE_S,
    DEFAULT_SEGMENT_MAX_BYTES,
)

MAX_STREAM_NAME_CHARS = 255
MAX_GROUP_NAME_CHARS = 255
MAX_PARTITIONS = 1024
MIN_SEGMENT_MAX_BYTES = 1024
INTERNAL_PREFIX = "__"
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+")


def validate_stream_name(name: object, *, internal: bool = False, field: str = "name") -> str:
    """Check a stream name: 1-255 of ``[A-Za-z0-9_.-]``, not starting with ``.`` or ``_``.

    Names starting with ``__`` are reserved for internal streams and allowed only with
    ``internal=True``.
    """
    if not isinstance(name, str) or not name:
        raise invalid_argument(field, "stream name must be a non-empty string")
    if len(name) > MAX_STREAM_NAME_CHARS:
        raise invalid_argument(
            field, f"stream name is {len(name)} characters; the limit is {MAX_STREAM_NAME_CHARS}"
        )
    if not _NAME_RE.fullmatch(name):
        raise invalid_argument(
            field, f"stream name {name!r} may only hold letters, digits, '_', '.' and '-'"
        )
    if name.startswith(INTERNAL_PREFIX):
        if not internal:
            raise invalid_argument(
                field,
                f"stream name {name!r}: the '{INTERNAL_PREFIX}' prefix is reserved for internal "
                'streams (create with "internal": true)',
            )
        if name in (INTERNAL_PREFIX,):
            raise invalid_argument(field, "an internal stream name needs more than '__'")
    elif name[0] in "._":
        raise invalid_argument(field, f"stream name {name!r} must not start with '.' or '_'")
    elif internal:
        raise invalid_argument("internal", f"internal stream names start with {INTERNAL_PREFIX!r}")
    return name


def subject_error(subject: object, *, allow_wildcards: bool = True) -> str | None:
    """Why ``subject`` is not a valid NATS subject (None if it is)."""
    if not isinstance(subject, str) or not subject:
        return "subject must be a non-empty string"
    if len(subject.encode()) > MAX_SUBJECT_BYTES:
        return f"subject is longer than {MAX_SUBJECT_BYTES} bytes"
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if not token:
            return f"subject {subject!r} has an empty token"
        if any(c.isspace() for c in token):
            return f"subject {subject!r} contains whitespace"
        if token == "*" or token == ">":
            if not allow_wildcards:
                return f"subject {subject!r} must not contain wildcards"
            if token == ">" and i != len(tokens) - 1:
                return f"subject {subject!r}: '>' may only be the last token"
        elif "*" in token or ">" in token:
            return f"subject {subject!r}: wildcards must be whole tokens"
    return None


def validate_subject(
    subject: object, *, field: str = "subject", allow_wildcards: bool = True
) -> str:
    """Check NATS subject syntax: non-empty ``.``-separated tokens, no whitespace, ``*`` as a
    whole token, ``>`` only as the last token."""
    error = subject_error(subject, allow_wildcards=allow_wildcards)
    if error is not None:
        raise invalid_argument(field, error)
    assert isinstance(subject, str)
    return subject


def has_wildcard(subject: str) -> bool:
    """True if ``subject`` holds a ``*`` or ``>`` token."""
    return any(t in ("*", ">") for t in subject.split("."))


def subject_matches(pattern: str, subject: str) -> bool:
    """True if the literal ``subject`` is matched by ``pattern`` (NATS wildcard rules)."""
    ptoks = pattern.split(".")
    stoks = subject.split(".")
    for i, p in enumerate(ptoks):
        if p == ">":
            return len(stoks) > i
        if i >= len(stoks):
            return False
        if p != "*" and p != stoks[i]:
            return False
    return len(ptoks) == len(stoks)


def partition_subject(subject: str, partition: int) -> str:
    """The subject partition ``partition`` listens on: the stream subject for 0, else
    ``<subject>.<partition>``."""
    return subject if partition == 0 else f"{subject}.{partition}"


def _opt_int(
    req: Mapping[str, Any], field: str, *, minimum: int, maximum: int | None = None
) -> int | None:
    value = req.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_argument(field, f"{field} must be an integer or null, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"within {minimum}..{maximum}"
        raise invalid_argument(field, f"{field} must be {bound}, got {value}")
    return value


def _opt_float(req: Mapping[str, Any], field: str, *, positive: bool = True) -> float | None:
    value = req.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid_argument(field, f"{field} must be a number of seconds or null, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise invalid_argument(
            field, f"{field} must be {'> 0' if positive else '>= 0'}, got {value}"
        )
    return float(value)


def _bool(req: Mapping[str, Any], field: str) -> bool:
    value = req.get(field, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid_argument(field, f"{field} must be true or false, got {value!r}")
    return value


def default_min_isr(replication_factor: int) -> int:
    """The default minimum ISR: 2 when the replication factor is 3 or more, else 1."""
    return 2 if replication_factor >= 3 else 1


def spec_from_request(
    req: Mapping[str, Any],
    *,
    cluster_size: int = 1,
    max_message_bytes: int = MAX_VALUE_BYTES,
    default_segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
    default_segment_max_age_s: float = DEFAULT_SEGMENT_MAX_AGE_S,
) -> StreamSpec:
    """Validate a CreateStream request body and return the spec with defaults filled in.

    Args:
        req: the decoded JSON request.
        cluster_size: servers available for replicas (a larger replication factor is refused).
        max_message_bytes: upper bound a stream may set for its own message limit.
        default_segment_max_bytes: segment size when the request gives none.
        default_segment_max_age_s: segment age when the request gives none.

    Raises:
        ApiError: INVALID_ARGUMENT with ``details.field``.
    """
    internal = _bool(req, "internal")
    name = validate_stream_name(req.get("name"), internal=internal)
    subject = validate_subject(req.get("subject"))
    partitions = _opt_int(req, "partitions", minimum=1, maximum=MAX_PARTITIONS) or 1
    if partitions > 1 and subject.split(".")[-1] == ">":
        raise invalid_argument(
            "partitions",
            f"subject {subject!r} ends in '>', so the stream can have one partition only",
        )
    rf = _opt_int(req, "replication_factor", minimum=1) or 1
    if rf > cluster_size:
        if cluster_size == 1:
            msg = f"replication factor {rf} needs a cluster; this server runs alone"
        else:
            msg = f"replication factor {rf} exceeds the {cluster_size} servers of the cluster"
        raise invalid_argument("replication_factor", msg)
    group = req.get("group")
    if group is not None:
        if not isinstance(group, str) or not group or not _NAME_RE.fullmatch(group):
            raise invalid_argument(
                "group", "group must be null or 1-255 of letters, digits, '_', '.' and '-'"
            )
        if len(group) > MAX_GROUP_NAME_CHARS:
            raise invalid_argument("group", f"group name over {MAX_GROUP_NAME_CHARS} characters")
    segment_max_bytes = _opt_int(req, "segment_max_bytes", minimum=MIN_SEGMENT_MAX_BYTES)
    segment_max_age_s = _opt_float(req, "segment_max_age_s")
    delete_retention_s = _opt_float(req, "delete_retention_s", positive=False)
    min_isr = _opt_int(req, "min_isr", minimum=1, maximum=rf) or default_min_isr(rf)
    durability = req.get("durability")
    if durability is None:
        durability = DURABILITY_FLUSHED
    elif durability not in DURABILITIES:
        raise invalid_argument(
            "durability", f"durability must be one of {', '.join(DURABILITIES)}, got {durability!r}"
        )
    elif durability == DURABILITY_WRITTEN and rf != 1:
        raise invalid_argument(
            "durability",
            f"durability {DURABILITY_WRITTEN!r} needs replication_factor 1 (got {rf}): with "
            "replicas use 'replicated' (written on every ISR member, fsynced on the leader)",
        )
    return StreamSpec(
        name=name,
        subject=subject,
        partitions=partitions,
        replication_factor=rf,
        group=group,
        compact=_bool(req, "compact"),
        retention_max_age_s=_opt_float(req, "retention_max_age_s"),
        retention_max_bytes=_opt_int(req, "retention_max_bytes", minimum=1),
        retention_max_messages=_opt_int(req, "retention_max_messages", minimum=1),
        segment_max_bytes=segment_max_bytes or default_segment_max_bytes,
        segment_max_age_s=segment_max_age_s or default_segment_max_age_s,
        delete_retention_s=(
            DEFAULT_DELETE_RETENTION_S if delete_retention_s is None else delete_retention_s
        ),
        max_message_bytes=_opt_int(req, "max_message_bytes", minimum=1, maximum=max_message_bytes),
        internal=internal,
        min_isr=min_isr,
        durability=durability,
        duplicate_window_s=(
            DEFAULT_DUPLICATE_WINDOW_S
            if (window := _opt_float(req, "duplicate_window_s", positive=False)) is None
            else window
        ),
    )
