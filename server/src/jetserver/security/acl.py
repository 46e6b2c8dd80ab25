"""Authorization rules: which identity may do what on which stream or group (pure).

Permissions (spec/protocol.md, "Authorization"):

- ``publish`` on a stream pattern: Produce.
- ``fetch``: Fetch (consumers), ListOffsets.
- ``admin``: CreateStream, DeleteStream. ``admin`` on the pattern ``*`` exactly also makes
  the identity a **cluster admin**: SetAcl and ListAcls.
- ``group`` on a **group-name** pattern: join and commit in those consumer groups, i.e.
  Produce to ``__groups`` valid records whose key and ``group`` field name such a group, to
  the key's partition; and read ``__groups`` (any group permission; a reader sees the other
  groups' records that share a partition). The same for share groups: create, read and
  append records of ``__share.<g>`` for a granted ``g`` (spec/security.md §4, checked in
  :mod:`.internal_records`).
- A Produce also needs ``publish`` on every other stream its subjects reach
  (spec/security.md §3, :mod:`.reach`).
- Any stream permission allows DescribeStream on that stream. Metadata and Hello are open
  to every authenticated identity.

Stream patterns never match internal stream names (``__`` prefix) unless the pattern itself
starts with ``__``: ``*`` does not grant access to ``__groups``.
Replica Fetch, OffsetForLeaderEpoch and ReportLeader are for servers only (the internal
identity).

The grants themselves (permission names, the value type, their syntax in requests and in
the configuration) are :mod:`jetserver.security.grants`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from jetsdk.metadata import INTERNAL_PREFIX
from jetserver.security.grants import ADMIN, GROUP, Grant

CLUSTER_ADMIN_PATTERN = "*"


def _matches(pattern: str, name: str, *, stream: bool) -> bool:
    if stream and name.startswith(INTERNAL_PREFIX) and not pattern.startswith(INTERNAL_PREFIX):
        return False
    return fnmatch.fnmatchcase(name, pattern)


def allows(grants: Iterable[Grant], permission: str, stream: str) -> bool:
    """True if ``grants`` hold ``permission`` on stream ``stream``."""
    return any(
        g.permission == permission and _matches(g.pattern, stream, stream=True) for g in grants
    )


def allows_any(grants: Iterable[Grant], stream: str) -> bool:
    """True if ``grants`` hold any stream permission on ``stream``."""
    return any(g.permission != GROUP and _matches(g.pattern, stream, stream=True) for g in grants)


def allows_group(grants: Iterable[Grant], group: str) -> bool:
    """True if ``grants`` hold ``group`` on group name ``group``."""
    return any(g.permission == GROUP and _matches(g.pattern, group, stream=False) for g in grants)


def has_group_permission(grants: Iterable[Grant]) -> bool:
    """True if ``grants`` hold ``group`` on any pattern."""
    return any(g.permission == GROUP for g in grants)


def is_cluster_admin(grants: Iterable[Grant]) -> bool:
    """True if ``grants`` hold ``admin`` on ``*`` (SetAcl, ListAcls)."""
    return any(g.permission == ADMIN and g.pattern == CLUSTER_ADMIN_PATTERN for g in grants)
