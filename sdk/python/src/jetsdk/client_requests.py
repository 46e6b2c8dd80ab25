"""Bodies of the Client's admin requests and the parsing of their JSON answers.

Pure functions: no I/O. :class:`~jetsdk.client.Client` sends what these build.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.fetch_messages import FetchResponseHeader, decode_fetch_response
from jetsdk.codec.messages import ProduceResult, decode_json, decode_produce_response, encode_json
from jetsdk.codec.produce_values import decode_produce_response_values
from jetsdk.codec.stream_settings import SettingError, check_settings
from jetsdk.errors import InvalidArgument, MalformedFrame, StreamExists, error_from_code
from jetsdk.metadata import ClusterMetadata, StreamInfo
from jetsdk.subjects import subject_matches

__all__ = [
    "OffsetPosition",
    "create_stream_body",
    "datetime_to_ns",
    "decode_answer",
    "decode_fetch_answer",
    "decode_produce_answer",
    "list_offsets_body",
    "parse_answer",
    "partitions_matching",
]

_T = TypeVar("_T")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

OffsetPosition = Literal["earliest", "latest"] | datetime | int
"""A ListOffsets position: ``"earliest"``, ``"latest"``, or a time (datetime, or int ns)."""

Durability = Literal["flushed", "replicated", "written"]
"""A stream's durability setting (spec/cluster.md, "Durability")."""


CREATE_OPTIONS = frozenset(
    {
        "partitions",
        "replication_factor",
        "compact",
        "group",
        "retention_max_age",
        "retention_max_bytes",
        "retention_max_messages",
        "segment_max_bytes",
        "segment_max_age",
        "delete_retention",
        "max_message_bytes",
        "min_isr",
        "durability",
        "duplicate_window",
        "no_nats_copies",
    }
)
"""The keyword arguments of :func:`create_stream_body` (``Client.create_stream`` passes
its own arguments of these names)."""


def create_stream_body(
    name: str,
    subject: str | None,
    *,
    partitions: int,
    replication_factor: int,
    compact: bool,
    group: str | None,
    retention_max_age: float | None,
    retention_max_bytes: int | None,
    retention_max_messages: int | None,
    segment_max_bytes: int | None,
    segment_max_age: float | None,
    delete_retention: float | None,
    max_message_bytes: int | None,
    min_isr: int | None,
    durability: Durability | None,
    duplicate_window: float | None,
    no_nats_copies: bool,
) -> bytes:
    """A CreateStream request body with a fresh ``op_id`` (None options are left out: the
    server's defaults apply).

    Raises:
        InvalidArgument: a setting outside its limits or of the wrong type, checked here
            with the server's own checker (:mod:`jetsdk.codec.stream_settings`); ``field``
            names the request key, as in the server's INVALID_ARGUMENT.
    """
    obj: dict[str, Any] = {
        "op_id": uuid.uuid4().hex,
        "name": name,
        "subject": subject if subject is not None else name,
        "partitions": partitions,
        "replication_factor": replication_factor,
        "group": group,
        "compact": compact,
    }
    optional = {
        "retention_max_age_s": retention_max_age,
        "retention_max_bytes": retention_max_bytes,
        "retention_max_messages": retention_max_messages,
        "segment_max_bytes": segment_max_bytes,
        "segment_max_age_s": segment_max_age,
        "delete_retention_s": delete_retention,
        "max_message_bytes": max_message_bytes,
        "min_isr": min_isr,
        "durability": durability,
        "duplicate_window_s": duplicate_window,
        "no_nats_copies": no_nats_copies or None,
    }
    obj.update({k: v for k, v in optional.items() if v is not None})
    try:
        check_settings(obj)
    except SettingError as exc:
        raise InvalidArgument(str(exc), details={"field": exc.field}) from None
    return encode_json(obj)


def parse_create_answer(name: str, body: bytes, *, exist_ok: bool) -> StreamInfo:
    """The stream of a CreateStream answer.

    Raises:
        MalformedFrame: no ``stream`` object in it.
        StreamExists: it existed already with the same settings and ``exist_ok`` is False.
    """
    answer = decode_answer(body)
    raw = answer.get("stream")
    if not isinstance(raw, dict):
        raise MalformedFrame("CreateStream response has no 'stream' object")
    if answer.get("created") is False and not exist_ok:
        raise StreamExists(
            f"stream {name!r} already exists with the same settings",
            details={"stream": name, "same_settings": True},
        )
    return StreamInfo.from_json(raw)


def list_offsets_body(stream: str, partition: int, position: OffsetPosition) -> bytes:
    """A ListOffsets request body.

    Raises:
        InvalidArgument: ``position`` is none of the accepted forms.
    """
    obj: dict[str, Any] = {"stream": stream, "partition": partition}
    if isinstance(position, datetime):
        obj.update(position="timestamp", timestamp_ns=datetime_to_ns(position))
    elif isinstance(position, int) and not isinstance(position, bool):
        obj.update(position="timestamp", timestamp_ns=position)
    elif position in ("earliest", "latest"):
        obj["position"] = position
    else:
        raise InvalidArgument(f"bad position {position!r}", details={"field": "position"})
    return encode_json(obj)


def datetime_to_ns(moment: datetime) -> int:
    """Nanoseconds since the epoch of ``moment`` (a naive datetime is taken as local time)."""
    if moment.tzinfo is None:
        moment = moment.astimezone()
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def decode_answer(body: bytes) -> dict[str, Any]:
    """A JSON answer as a dict; MalformedFrame if it is not one."""
    try:
        return decode_json(body)
    except CodecError as exc:
        raise MalformedFrame(f"bad JSON response: {exc}") from exc


def parse_answer(parser: Callable[[dict[str, Any]], _T], body: bytes) -> _T:
    """A JSON answer read by ``parser``."""
    return parser(decode_answer(body))


def decode_produce_answer(
    answer: bytes, count: int, current_values: bool = False, latest_values: bool = False
) -> list[ProduceResult]:
    """A Produce response's results, one per message sent (``count``; ``current_values``,
    ``latest_values``: the request had that flag).

    Raises:
        MalformedFrame: undecodable, or another number of results.
    """
    try:
        if current_values:
            results = decode_produce_response_values(answer, latest_values)
        else:
            results = decode_produce_response(answer)
    except CodecError as exc:
        raise MalformedFrame(f"bad Produce response: {exc}") from exc
    if len(results) != count:
        raise MalformedFrame(f"Produce response has {len(results)} results for {count}")
    return results


def decode_fetch_answer(
    answer: bytes | bytearray, stream: str, partition: int, offset: int
) -> tuple[FetchResponseHeader, memoryview]:
    """A Fetch response's header and record bytes.

    Raises:
        MalformedFrame: undecodable. JetError: the error code it carries (with the
            partition, offset, log start and HW as details).
    """
    try:
        header, records = decode_fetch_response(answer)
    except CodecError as exc:
        raise MalformedFrame(f"bad Fetch response: {exc}") from exc
    if header.error_code != ErrorCode.NONE:
        raise error_from_code(
            header.error_code,
            f"fetch {stream}/{partition} at offset {offset}",
            {
                "stream": stream,
                "partition": partition,
                "offset": offset,
                "log_start": header.log_start,
                "hw": header.hw,
            },
        )
    return header, records


def partitions_matching(meta: ClusterMetadata, subject: str) -> list[tuple[StreamInfo, int]]:
    """Every (stream, partition) whose partition subject matches the literal ``subject``,
    ordered by stream name."""
    found = []
    for name in sorted(meta.streams):
        info = meta.streams[name]
        for part in info.partitions:
            if subject_matches(part.subject, subject):
                found.append((info, part.partition))
    return found
