"""The UpdateStream op of a request (spec/protocol.md, UpdateStream): checked here once,
for the request handlers of a server alone and the cluster's forwarder alike.

The updatable settings and their limits are the SDK's (:mod:`jetsdk.codec.stream_settings`);
the whole result passes the create checker too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.limits import DEFAULT_MAX_MESSAGE_BYTES
from jetsdk.codec.stream_settings import SettingError, check_settings, check_update
from jetserver.errors import ApiError, invalid_argument
from jetserver.metadata.model import StreamMeta
from jetserver.metadata.ops import UpdateStream
from jetserver.metadata.validate import check_message_limit

__all__ = ["update_op"]


def update_op(
    req: Mapping[str, Any],
    known: Mapping[str, StreamMeta],
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    nats_max_payload: int = 0,
) -> UpdateStream:
    """The UpdateStream op of a request ``{"name", "settings": {...}}``, checked against
    the stream's current settings in ``known``; a new ``max_message_bytes`` also against
    this server's limit and NATS's ``max_payload`` (:func:`check_message_limit`).

    Raises:
        ApiError: INVALID_ARGUMENT naming the field (a setting that cannot change, an
            unknown one, a value outside its limits, no setting), STREAM_NOT_FOUND.
    """
    name = req.get("name")
    if not isinstance(name, str) or not name:
        raise invalid_argument("name", "name must be a non-empty string")
    settings = req.get("settings")
    if not isinstance(settings, dict) or not settings:
        raise invalid_argument("settings", "settings must be an object naming 1 or more settings")
    meta = known.get(name)
    try:
        checked = check_update(settings)
        if meta is not None:
            check_settings({**meta.spec.to_dict(), **checked})  # the create checker, whole
    except SettingError as exc:
        raise invalid_argument(exc.field, str(exc)) from None
    if "max_message_bytes" in checked:
        check_message_limit(checked["max_message_bytes"], max_message_bytes, nats_max_payload)
    if meta is None:
        raise ApiError(
            ErrorCode.STREAM_NOT_FOUND, f"stream {name!r} does not exist", {"stream": name}
        )
    return UpdateStream(name, tuple(sorted(checked.items())))
