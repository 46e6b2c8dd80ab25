"""Validation of stream names, subjects and CreateStream requests (spec/protocol.md).

Every check raises :class:`~jetserver.errors.ApiError` INVALID_ARGUMENT naming the field,
with a message that says what is allowed. The settings' limits and their checker are
shared with the SDK (:mod:`jetsdk.codec.stream_settings`); this module adds what only a
server knows (names, subjects, its cluster's size, its own message limit).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

from jetsdk.codec.limits import ENVELOPE_ALLOWANCE_BYTES, MAX_SUBJECT_BYTES, MAX_VALUE_BYTES
from jetsdk.codec.stream_settings import MAX_PARTITIONS as MAX_PARTITIONS
from jetsdk.codec.stream_settings import MIN_SEGMENT_MAX_BYTES as MIN_SEGMENT_MAX_BYTES
from jetsdk.codec.stream_settings import SettingError, check_settings
from jetsdk.codec.stream_settings import default_min_isr as default_min_isr
from jetsdk.metadata import INTERNAL_PREFIX
from jetsdk.metadata import partition_subject as partition_subject
from jetsdk.subjects import is_literal
from jetsdk.subjects import subject_matches as subject_matches
from jetserver.errors import invalid_argument
from jetserver.metadata.model import StreamSpec
from jetserver.storage.config import DEFAULT_SEGMENT_MAX_AGE_S, DEFAULT_SEGMENT_MAX_BYTES

MAX_STREAM_NAME_CHARS = 255
MAX_GROUP_NAME_CHARS = 255
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
    return not is_literal(subject)


@contextlib.contextmanager
def _as_invalid_argument() -> Iterator[None]:
    """A :class:`SettingError` of the shared checker as INVALID_ARGUMENT naming its field."""
    try:
        yield
    except SettingError as exc:
        raise invalid_argument(exc.field, str(exc)) from None


def check_message_limit(value: int | None, server_limit: int, nats_max_payload: int = 0) -> None:
    """Check a stream's ``max_message_bytes`` (None: the server's limit) against this
    server's ``limits.max_message_bytes`` and the room NATS gives a message: its
    ``max_payload`` minus :data:`~jetsdk.codec.limits.ENVELOPE_ALLOWANCE_BYTES` (a message
    above that could not reach the stream as a NATS message, so the limit would lie).

    Raises:
        ApiError: INVALID_ARGUMENT with ``details.field`` ``max_message_bytes``.
    """
    if value is None:
        return
    if value > server_limit:
        raise invalid_argument(
            "max_message_bytes",
            f"max_message_bytes must be within 1..{server_limit} (this server's "
            f"limits.max_message_bytes), got {value}",
        )
    room = nats_max_payload - ENVELOPE_ALLOWANCE_BYTES
    if nats_max_payload and value > room:
        raise invalid_argument(
            "max_message_bytes",
            f"max_message_bytes must be within 1..{max(room, 0)} (NATS's max_payload "
            f"{nats_max_payload} less {ENVELOPE_ALLOWANCE_BYTES} bytes for the envelope), "
            f"got {value}",
        )


def spec_from_request(
    req: Mapping[str, Any],
    *,
    cluster_size: int = 1,
    max_message_bytes: int = MAX_VALUE_BYTES,
    default_segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
    default_segment_max_age_s: float = DEFAULT_SEGMENT_MAX_AGE_S,
    nats_max_payload: int = 0,
) -> StreamSpec:
    """Validate a CreateStream request body and return the spec with defaults filled in.

    Args:
        req: the decoded JSON request.
        cluster_size: servers available for replicas (a larger replication factor is refused).
        max_message_bytes: upper bound a stream may set for its own message limit.
        default_segment_max_bytes: segment size when the request gives none.
        default_segment_max_age_s: segment age when the request gives none.
        nats_max_payload: NATS's ``max_payload`` as this server's link knows it (0:
            unknown); see :func:`check_message_limit`.

    Raises:
        ApiError: INVALID_ARGUMENT with ``details.field``.
    """
    with _as_invalid_argument():
        settings = check_settings(req)
    internal = settings["internal"]
    name = validate_stream_name(req.get("name"), internal=internal)
    subject = validate_subject(req.get("subject"))
    partitions = settings["partitions"]
    if partitions > 1 and subject.split(".")[-1] == ">":
        raise invalid_argument(
            "partitions",
            f"subject {subject!r} ends in '>', so the stream can have one partition only",
        )
    rf = settings["replication_factor"]
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
    max_message = settings["max_message_bytes"]
    check_message_limit(max_message, max_message_bytes, nats_max_payload)
    # check_settings returns every StreamSpec field but the name, subject and group.
    settings["segment_max_bytes"] = settings["segment_max_bytes"] or default_segment_max_bytes
    settings["segment_max_age_s"] = settings["segment_max_age_s"] or default_segment_max_age_s
    return StreamSpec(name=name, subject=subject, group=group, **settings)
