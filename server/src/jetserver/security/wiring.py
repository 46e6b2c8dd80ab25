"""Glue between the security gate and the server: how SetAcl is applied (single-server store
or Raft), the bootstrap of configured grants, and the per-connection setup of the listener.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from jetsdk.codec.error_codes import RETRIABLE, ErrorCode
from jetsdk.codec.frames import Frame
from jetserver.errors import ApiError
from jetserver.logs import fields
from jetserver.metadata.model import Grant
from jetserver.metadata.ops import SetAcl
from jetserver.metadata.store import MetadataStore
from jetserver.protocol.connection import Reply
from jetserver.protocol.gate_port import Session
from jetserver.protocol.socket_io import SocketIO
from jetserver.security.gate import AclProposer, Security
from jetserver.security.grants import bootstrap_acls

if TYPE_CHECKING:
    from jetserver.broker.running import MetadataView
    from jetserver.cluster import ClusterNode
    from jetserver.config.server import ServerConfig

log = logging.getLogger(__name__)

BOOTSTRAP_ATTEMPTS = 30
"""Bounded retries of proposing the configured grants (no metadata leader yet...)."""
BOOTSTRAP_RETRY_S = 1.0


class SessionHandler(Protocol):
    """The server's request handler: a frame and its connection's session."""

    def __call__(self, frame: Frame, session: Session | None = None) -> Awaitable[Reply]: ...


FrameHandler = Callable[[Frame], Awaitable[Reply]]
ConnectionSetup = Callable[[socket.socket], Awaitable[tuple[SocketIO, FrameHandler]]]


def acl_proposer(store: MetadataView, node: ClusterNode | None) -> AclProposer:
    """SetAcl through Raft in a cluster, else into the single server's metadata.json."""

    async def propose(req: dict[str, Any], identity: str, grants: tuple[Grant, ...]) -> None:
        if node is not None:
            assert node.requests is not None
            await node.requests.set_acl(req, identity, grants)
            return
        assert isinstance(store, MetadataStore)
        if req.get("if_absent") is True and identity in store.state.acls:
            return
        try:
            result = await store.propose(SetAcl(identity, grants))
        except OSError as exc:
            raise ApiError(ErrorCode.STORAGE_ERROR, f"cannot write metadata: {exc}") from exc
        if not result.ok:
            raise ApiError(result.error_code, result.message)

    return propose


def connection_setup(security: Security, handle: SessionHandler) -> ConnectionSetup:
    """The listener's per-socket setup: TLS handshake and a session-bound handler."""

    async def setup(sock: socket.socket) -> tuple[SocketIO, FrameHandler]:
        io, session = await security.setup(sock)

        # A partial (a C call), not a class or closure of ours: no Python frame per
        # request; it returns ``handle``'s coroutine.
        return io, functools.partial(handle, session=session)

    return setup


async def bootstrap(config: ServerConfig, security: Security) -> None:
    """Propose the configured ``[auth] acls`` for identities without an entry (bounded
    retries; never raises)."""
    wanted = bootstrap_acls(config.auth.acls)
    for identity, grants in wanted.items():
        digest = hashlib.sha256(repr((identity, grants)).encode()).hexdigest()[:16]
        req = {
            "identity": identity,
            "grants": [g.to_dict() for g in grants],
            "op_id": f"acl-bootstrap-{identity[:64]}-{digest}",
            "if_absent": True,
        }
        for attempt in range(1, BOOTSTRAP_ATTEMPTS + 1):
            if identity in security.acls():
                break
            try:
                await security.propose_acl(req, identity, grants)
                log.info("bootstrap grants proposed", extra=fields(identity=identity))
                break
            except ApiError as exc:
                if exc.code not in RETRIABLE or attempt == BOOTSTRAP_ATTEMPTS:
                    log.warning(
                        "bootstrap grants not applied",
                        extra=fields(identity=identity, error=exc.message),
                    )
                    break
            except Exception as exc:
                log.warning(
                    "bootstrap grants not applied", extra=fields(identity=identity, error=repr(exc))
                )
                break
            await anyio.sleep(BOOTSTRAP_RETRY_S)
