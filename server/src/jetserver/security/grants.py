"""Grants: the permission names, the :class:`Grant` value the metadata stores per identity,
and their syntax in a SetAcl request and in ``[auth] acls`` (pure, no I/O).

Below the configuration, which checks ``acls`` entries when it is loaded; the rules that
decide what grants allow are :mod:`jetserver.security.acl`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from jetserver.errors import ConfigError
from jetserver.security.passwords import check_identity

PUBLISH = "publish"
FETCH = "fetch"
ADMIN = "admin"
GROUP = "group"
PERMISSIONS = (PUBLISH, FETCH, ADMIN, GROUP)
"""The permissions (spec/protocol.md, "Authorization")."""
MAX_GRANTS = 256
"""Most grants one identity may hold."""
MAX_PATTERN_CHARS = 255
"""Longest pattern of a grant."""


@attrs.frozen
class Grant:
    """One permission of an identity on the names matching a glob pattern."""

    permission: str
    """``publish``, ``fetch``, ``admin`` (stream names) or ``group`` (group names)."""
    pattern: str
    """Glob (``*``, ``?``, ``[...]``) matched against the whole stream or group name."""

    def to_dict(self) -> dict[str, Any]:
        """As a JSON object."""
        return {"permission": self.permission, "pattern": self.pattern}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Grant:
        """Inverse of :meth:`to_dict`."""
        return cls(permission=str(data["permission"]), pattern=str(data["pattern"]))


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
