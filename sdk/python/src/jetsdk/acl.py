"""Access control lists: read and replace an identity's grants (SetAcl / ListAcls, APIs 11
and 12 in spec/protocol.md). Needs a cluster admin (``admin`` on ``*``) when the server
requires authentication.

    await set_acl(client, "alice", [("publish", "orders.*"), ("fetch", "orders.*")])
    print(await list_acls(client))   # {"alice": [("publish", "orders.*"), ...]}

Permissions: ``publish``, ``fetch``, ``admin`` on stream-name globs; ``group`` on group-name
globs (consumer groups). An empty list leaves the identity with no rights.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from jetsdk.client import Client
from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.errors import MalformedFrame

__all__ = ["PERMISSIONS", "GrantPair", "list_acls", "set_acl"]

PERMISSIONS = ("publish", "fetch", "admin", "group")
"""Permission names the server knows."""

GrantPair = tuple[str, str]
"""``(permission, pattern)``."""


async def set_acl(client: Client, identity: str, grants: Iterable[GrantPair]) -> None:
    """Replace the grants of ``identity`` (applied on every server once this returns).

    Raises:
        PermissionDenied: the client is not a cluster admin.
        InvalidArgument: a bad identity, permission or pattern.
    """
    body = {
        "identity": identity,
        "grants": [{"permission": p, "pattern": pattern} for p, pattern in grants],
        "op_id": uuid.uuid4().hex,
    }
    await client.request_any(Api.SET_ACL, encode_json(body))


async def list_acls(client: Client) -> dict[str, list[GrantPair]]:
    """Every identity's grants, as the answering server knows them.

    Raises:
        PermissionDenied: the client is not a cluster admin.
    """
    answer = await client.request_any(Api.LIST_ACLS, encode_json({}))
    try:
        acls = decode_json(answer)["acls"]
        return {
            str(identity): [(str(g["permission"]), str(g["pattern"])) for g in grants]
            for identity, grants in acls.items()
        }
    except (CodecError, KeyError, TypeError, AttributeError) as exc:
        raise MalformedFrame(f"bad ListAcls answer: {exc}") from exc
