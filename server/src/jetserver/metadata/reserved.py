"""Reserved names: the internal streams are the server's (spec/security.md §2).

The server defines every internal stream: only ``__groups`` (consumer groups) and
``__share.<group>`` (share groups) exist, and their settings are the server's. A
CreateStream of one of them (``"internal": true``) asks the server to make sure it exists:
each setting the request gives must equal the server's definition (INVALID_ARGUMENT naming
the first one that does not), so no client can point an internal stream at another subject,
compact it or shorten its retention. Only the replication factor, ``min_isr`` and the
durability are the client's (bounded by the cluster as for any stream).

User streams may not listen on the server's subjects: a subject whose first token is
``_jet`` is refused (``subject``).

Pure functions over :class:`~jetserver.metadata.model.StreamSpec`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jetsdk.metadata import INTERNAL_PREFIX
from jetserver.errors import invalid_argument
from jetserver.metadata.model import StreamSpec
from jetserver.metadata.validate import spec_from_request

GROUPS_STREAM = "__groups"
"""The consumer groups' log (spec/groups.md §2)."""
GROUPS_SUBJECT = "_jet.groups"
GROUPS_PARTITIONS = 16
GROUPS_RETENTION_S = 7 * 86_400.0
GROUPS_SEGMENT_BYTES = 16 * 1024 * 1024
SHARE_STREAM_PREFIX = "__share."
"""A share group's log is ``__share.<group>`` (spec/share-groups.md §2)."""
SHARE_SUBJECT_PREFIX = "_jet.share."
RESERVED_SUBJECT_TOKEN = "_jet"
"""First subject token reserved for the server's internal streams."""
_SHARE_GROUP = re.compile(r"[A-Za-z0-9_.-]{1,200}")


def share_group_of(stream: str) -> str | None:
    """The share group whose log ``stream`` is (None: not a share log name)."""
    if not stream.startswith(SHARE_STREAM_PREFIX):
        return None
    group = stream[len(SHARE_STREAM_PREFIX) :]
    return group if _SHARE_GROUP.fullmatch(group) else None


def internal_definition(name: str) -> dict[str, Any] | None:
    """The server's settings of internal stream ``name`` (None: no such internal stream)."""
    common: dict[str, Any] = {
        "compact": False,
        "group": None,
        "retention_max_bytes": None,
        "retention_max_messages": None,
    }
    if name == GROUPS_STREAM:
        return {
            "subject": GROUPS_SUBJECT,
            "partitions": GROUPS_PARTITIONS,
            "retention_max_age_s": GROUPS_RETENTION_S,
            "segment_max_bytes": GROUPS_SEGMENT_BYTES,
            **common,
        }
    group = share_group_of(name)
    if group is not None:
        return {
            "subject": SHARE_SUBJECT_PREFIX + group,
            "partitions": 1,
            "retention_max_age_s": None,
            **common,
        }
    return None


def with_internal_settings(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """``request`` (a CreateStream body) with the server's settings filled in where an
    internal stream's request leaves them out (or null); any other request unchanged."""
    name = request.get("name")
    if request.get("internal") is not True or not isinstance(name, str):
        return request
    definition = internal_definition(name)
    if definition is None:
        return request
    filled = dict(request)
    for field, value in definition.items():
        if filled.get(field) is None:
            filled[field] = value
    return filled


def check_reserved(spec: StreamSpec) -> StreamSpec:
    """``spec`` if it respects the reserved names and subjects.

    Raises:
        ApiError: INVALID_ARGUMENT with ``details.field``: an internal stream the server
            does not define (``name``), a setting of an internal stream other than the
            server's, or a user stream on a ``_jet.`` subject (``subject``).
    """
    if not spec.internal:
        if spec.subject.split(".", 1)[0] == RESERVED_SUBJECT_TOKEN:
            raise invalid_argument(
                "subject",
                f"subject {spec.subject!r}: subjects starting with "
                f"'{RESERVED_SUBJECT_TOKEN}.' are reserved for the server's internal streams",
            )
        return spec
    definition = internal_definition(spec.name)
    if definition is None:
        raise invalid_argument(
            "name",
            f"internal stream {spec.name!r}: the server defines only {GROUPS_STREAM!r} and "
            f"'{SHARE_STREAM_PREFIX}<group>'",
        )
    for field, wanted in definition.items():
        got = getattr(spec, field)
        if got != wanted:
            raise invalid_argument(
                field,
                f"internal stream {spec.name!r}: {field} is the server's ({wanted!r}), "
                f"not {got!r}; leave it out",
            )
    return spec


def is_internal(stream: str) -> bool:
    """True if ``stream`` is an internal stream name (``__`` prefix): the server's, written
    only through Produce on the jet port, never from NATS."""
    return stream.startswith(INTERNAL_PREFIX)


def checked_spec(request: Mapping[str, Any], **limits: Any) -> StreamSpec:
    """:func:`~jetserver.metadata.validate.spec_from_request` (``limits`` are its keyword
    arguments) of a CreateStream body, with the server's settings of an internal stream
    filled in and the reserved names and subjects checked (:func:`check_reserved`).

    Raises:
        ApiError: INVALID_ARGUMENT with ``details.field``.
    """
    return check_reserved(spec_from_request(with_internal_settings(request), **limits))
