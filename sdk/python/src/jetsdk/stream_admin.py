"""Request bodies and answers of PurgeStream and UpdateStream (spec/protocol.md).

Pure, no I/O: :class:`~jetsdk.client.Client` sends what these build.
"""

from __future__ import annotations

import uuid
from typing import Any

from jetsdk.codec.messages import encode_json
from jetsdk.codec.stream_settings import (
    FIXED_SETTINGS,
    UPDATABLE_SETTINGS,
    SettingError,
    check_update,
)
from jetsdk.errors import InvalidArgument

__all__ = ["purge_body", "update_body"]


def purge_body(stream: str, partition: int, before: int | None) -> bytes:
    """A PurgeStream request body for one partition (``before`` None: every committed
    record).

    Raises:
        InvalidArgument: ``before`` is not an offset >= 0.
    """
    if before is not None and (
        isinstance(before, bool) or not isinstance(before, int) or before < 0
    ):
        raise InvalidArgument(
            f"before must be None or an offset >= 0, got {before!r}", details={"field": "before"}
        )
    return encode_json({"stream": stream, "partition": partition, "before": before})


_SDK_NAMES = {
    "retention_max_age": "retention_max_age_s",
    "segment_max_age": "segment_max_age_s",
    "delete_retention": "delete_retention_s",
    "duplicate_window": "duplicate_window_s",
}
"""``create_stream`` argument names that differ from the request keys (seconds)."""


def update_body(name: str, settings: dict[str, Any]) -> bytes:
    """An UpdateStream request body with a fresh ``op_id``: ``settings`` by their
    ``create_stream`` names (``retention_max_age``) or request keys
    (``retention_max_age_s``); None resets a limit to none / the default.

    Raises:
        InvalidArgument: no setting, a setting that cannot change (``partitions``,
            ``replication_factor``, ...), an unknown one, or a value outside its limits
            (checked with the server's checker); ``field`` names it.
    """
    changes = {_SDK_NAMES.get(k, k): v for k, v in settings.items()}
    if not changes:
        raise InvalidArgument("no setting to update", details={"field": "settings"})
    try:
        check_update(changes)
    except SettingError as exc:
        raise InvalidArgument(str(exc), details={"field": exc.field}) from None
    return encode_json({"op_id": uuid.uuid4().hex, "name": name, "settings": changes})


assert not set(_SDK_NAMES.values()) - set(UPDATABLE_SETTINGS) - set(FIXED_SETTINGS)
