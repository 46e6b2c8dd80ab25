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
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from jetsdk.metadata import INTERNAL_PREFIX
from jetserver.errors import ConfigError
from jetserver.metadata.model import Grant
from jetserver.security.passwords import check_identity

PUBLISH = "publish"
FETCH = "fetch"
ADMIN = "admin"
GROUP = "group"
PERMISSIONS = (PUBLISH, FETCH, ADMIN, GROUP)
MAX_GRANTS = 256
"""Most grants one identity may hold."""
MAX_PATTERN_CHARS = 255
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


def check_grant(permission: Any, pattern: Any) -> Grant:
    """A validated grant.

    Raises:
        ValueError: unknown permission, or a pattern that is not 1-255 characters.
    """
    if permission not in PERMISSIONS:
        raise ValueError(f"permission must be one of {list(PERMISSIONS)}, got {permission!r}")
    if not isinstance(pattern, str) or not 0 < len(pattern) <= MAX_PATTERN_CHARS:
        raise ValueError(f"a pattern is a string of 1-{MAX_PATTERN_CHARS} characters")
    return Grant(permission=str(permission), pattern=pattern)


def grants_from_request(request: Mapping[str, Any]) -> tuple[str, tuple[Grant, ...]]:
    """``(identity, grants)`` of a SetAcl request.

    Raises:
        ValueError: a bad identity, grant list or grant (the message says which).
    """
    identity = request.get("identity")
    if not isinstance(identity, str):
        raise ValueError("identity must be a string")
    check_identity(identity)
    raw = request.get("grants")
    if not isinstance(raw, list) or len(raw) > MAX_GRANTS:
        raise ValueError(f"grants must be a list of at most {MAX_GRANTS} objects")
    grants: list[Grant] = []
    for item in raw:
        if not isinstance(item, dict):
            raise ValueError("each grant is an object {permission, pattern}")
        grant = check_grant(item.get("permission"), item.get("pattern"))
        if grant not in grants:
            grants.append(grant)
    return identity, tuple(grants)


def parse_grant_spec(spec: str) -> tuple[str, tuple[Grant, ...]]:
    """``"identity:perm[,perm...]:pattern"`` -> ``(identity, grants)``; permissions may also
    be joined with ``+`` (``JET_AUTH_ACLS`` splits its value on commas).

    Raises:
        ConfigError: malformed.
    """
    parts = spec.split(":", 2)
    if len(parts) != 3:
        raise ConfigError(f"an acl must be written identity:perm[,perm...]:pattern, got {spec!r}")
    identity, perms, pattern = parts
    try:
        check_identity(identity)
        names = perms.replace("+", ",").split(",")
        grants = tuple(check_grant(p.strip(), pattern) for p in names if p.strip())
    except ValueError as exc:
        raise ConfigError(f"acl {spec!r}: {exc}") from None
    if not grants:
        raise ConfigError(f"acl {spec!r}: no permission")
    return identity, grants


def bootstrap_acls(specs: Iterable[str]) -> dict[str, tuple[Grant, ...]]:
    """The configured ``acls`` grouped by identity (order kept, duplicates dropped).

    Raises:
        ConfigError: a malformed entry.
    """
    out: dict[str, list[Grant]] = {}
    for spec in specs:
        identity, grants = parse_grant_spec(spec)
        bucket = out.setdefault(identity, [])
        bucket.extend(g for g in grants if g not in bucket)
    return {i: tuple(g) for i, g in out.items()}
