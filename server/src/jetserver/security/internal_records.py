"""What a ``group`` grant may write into the internal streams (spec/security.md §4).

An identity whose right to write an internal stream comes from a ``group`` grant writes only
well-formed records of its own groups, each where the protocol puts it:

- ``__groups``: every message is a valid group record of a version this server knows
  (spec/groups.md §3.1), keyed by its ``group`` field, that group matched by a ``group``
  grant, sent to the partition the key maps to (spec/partitioning.md).
- ``__share.<g>``: the identity holds ``group`` on ``g``, and every message is a valid share
  record (spec/share-groups.md §3) of group ``g``.

Refusals: PERMISSION_DENIED (:class:`Denied`) for a group the grants do not cover,
INVALID_ARGUMENT (field ``value`` or ``partition``) for a malformed record, an unknown
version or the wrong partition. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable

from jetsdk.codec.messages import ProduceMessage
from jetsdk.group.errors import InvalidGroupRecord, UnsupportedGroupVersion
from jetsdk.group.records import decode_record
from jetsdk.partitioner import partition_for_key
from jetsdk.share.records import InvalidShareRecord, UnsupportedShareVersion, decode_share_record
from jetserver.errors import invalid_argument
from jetserver.metadata.model import Grant
from jetserver.security import acl


class Denied(Exception):
    """A request the identity may not make (the message says what it needs)."""


def check_group_records(
    grants: Iterable[Grant],
    partition: int,
    partitions: int | None,
    messages: Iterable[ProduceMessage],
) -> None:
    """Check messages produced to ``__groups`` ``partition`` (of ``partitions``; None: the
    stream does not exist, the handler answers) by an identity with only group grants.

    Raises:
        Denied: a group the grants do not cover, or no key.
        ApiError: INVALID_ARGUMENT (``value``: not a valid record of a known version, or its
            ``group`` differs from the key; ``partition``: not the key's partition).
    """
    grants = tuple(grants)
    for i, message in enumerate(messages):
        if message.key is None:
            raise Denied("permission denied: group records are keyed by their group")
        try:
            group = message.key.decode("utf-8")
        except UnicodeDecodeError:
            raise Denied("permission denied: a group record's key is its group name") from None
        if not acl.allows_group(grants, group):
            raise Denied(f"permission denied: needs group {group!r}")
        try:
            record = decode_record(message.value)
        except UnsupportedGroupVersion as exc:
            raise invalid_argument("value", f"message {i}: {exc}") from None
        except InvalidGroupRecord as exc:
            raise invalid_argument(
                "value", f"message {i}: not a valid group record: {exc}"
            ) from None
        if record.group != group:
            if not acl.allows_group(grants, record.group):
                raise Denied(f"permission denied: needs group {record.group!r}")
            raise invalid_argument(
                "value", f"message {i}: record of group {record.group!r} keyed {group!r}"
            )
        if partitions is not None and partition != partition_for_key(message.key, partitions):
            raise invalid_argument(
                "partition",
                f"group {group!r} writes to partition "
                f"{partition_for_key(message.key, partitions)} of __groups, not {partition}",
            )


def check_share_records(group: str, messages: Iterable[ProduceMessage]) -> None:
    """Check messages produced to ``__share.<group>`` by an identity whose right comes
    from ``group`` grants (the caller checked the grant on ``group``).

    Raises:
        ApiError: INVALID_ARGUMENT (``value``): not a valid share record of a known version
            of ``group``.
    """
    for i, message in enumerate(messages):
        try:
            record = decode_share_record(message.value)
        except (InvalidShareRecord, UnsupportedShareVersion) as exc:
            raise invalid_argument(
                "value", f"message {i}: not a valid share record: {exc}"
            ) from None
        if record.group != group:
            raise invalid_argument(
                "value", f"message {i}: a record of group {record.group!r} in share log {group!r}"
            )
