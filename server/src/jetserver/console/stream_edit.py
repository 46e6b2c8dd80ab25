"""Console writes on an existing stream (``--allow-writes``): change its settings
(UpdateStream) and purge its records (PurgeStream).

Routes (see :mod:`jetserver.console.app` for the write guard)::

    POST /api/streams/NAME/settings  {"retention_max_age"?, "retention_max_bytes"?,
                                      "retention_max_messages"?, "segment_max_bytes"?,
                                      "segment_max_age"?, "delete_retention"?}
                                     (null or "none": no limit; "" leaves it as it is)
    POST /api/streams/NAME/purge     {"partition"?: P, "before"?: OFFSET}
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from jetsdk import Client
from jetserver.console.http import HttpError

__all__ = ["purge_stream", "update_stream"]

_SETTINGS = {
    "retention_max_age": float,
    "retention_max_bytes": int,
    "retention_max_messages": int,
    "segment_max_bytes": int,
    "segment_max_age": float,
    "delete_retention": float,
}
"""What the edit form may send, and the type of each (a form sends strings)."""


def _number(name: str, value: Any, kind: type) -> int | float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    if isinstance(value, bool) or (kind is int and isinstance(value, float)):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{name} must be a whole number")
    try:
        return kind(value)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{name} must be a number or none") from None


async def update_stream(client: Client, name: str, body: Any) -> dict[str, Any]:
    """Apply the form's settings; the SDK and the servers check them (InvalidArgument naming
    the setting: 400). Any other key (``partitions``...) goes to the SDK as it is, which
    refuses it naming it."""
    if not isinstance(body, dict):
        raise HttpError(HTTPStatus.BAD_REQUEST, "body must be an object of settings")
    settings: dict[str, Any] = {}
    for key, value in body.items():
        if value == "":
            continue
        kind = _SETTINGS.get(key)
        settings[key] = value if kind is None else _number(key, value, kind)
    if not settings:
        raise HttpError(HTTPStatus.BAD_REQUEST, "name at least one setting to change")
    info = await client.update_stream(name, **settings)
    return {"updated": info.to_json()}


async def purge_stream(client: Client, name: str, body: Any) -> dict[str, Any]:
    """Purge every partition, or ``partition``, below ``before`` (default: everything
    committed); answer each partition's new log start."""
    if not isinstance(body, dict):
        raise HttpError(HTTPStatus.BAD_REQUEST, "body must be an object")
    partition, before = body.get("partition"), body.get("before")
    for key, value in (("partition", partition), ("before", before)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise HttpError(HTTPStatus.BAD_REQUEST, f"{key} must be a whole number")
    starts = await client.purge_stream(name, partition, before)
    return {"stream": name, "log_start": {str(p): s for p, s in starts.items()}}
