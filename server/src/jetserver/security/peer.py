"""How this server connects to the other servers of its cluster: TLS and the internal token.

Forwarded metadata requests, liveness probes and silent-leader reports
(:class:`~jetserver.cluster.peers.PeerPool`) and replica fetches
(:class:`~jetserver.replication.fetcher.FollowerFetcher`) use the client protocol; with
``[tls]`` they use TLS (``peer_*`` settings), and with ``[auth] enabled`` they authenticate
with ``internal_token`` as the internal identity, which has every right.

The Raft traffic of PySyncObj is not client protocol: it is encrypted and authenticated by
the cluster password (``[cluster] password``), not by these settings.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

import attrs

from jetsdk.connection import Connection
from jetsdk.security import Credentials, authenticate, tls_dialer
from jetsdk.transport import Address, ByteStream, Dialer, tcp_dialer
from jetserver.errors import ConfigError
from jetserver.security.config import TlsConfig

if TYPE_CHECKING:
    from jetserver.config.server import ServerConfig


def peer_context(cfg: TlsConfig) -> ssl.SSLContext | None:
    """The context for connections to other servers (None without TLS): verifies them
    against ``peer_ca`` (default ``ca``) and presents ``peer_cert`` (default ``cert``).

    Raises:
        ConfigError: a file cannot be loaded.
    """
    if not cfg.enabled:
        return None
    cert = cfg.peer_cert or cfg.cert
    key = cfg.peer_key if cfg.peer_cert else cfg.key
    try:
        ctx = ssl.create_default_context(cafile=cfg.peer_ca or cfg.ca)
        ctx.load_cert_chain(cert, key)  # type: ignore[arg-type]
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"[tls] cannot load peer certificate files: {exc}") from None
    return ctx


@attrs.frozen
class PeerSecurity:
    """TLS and credentials for server-to-server connections."""

    dialer_tls: bool = False
    """True when peers speak TLS."""
    credentials: Credentials | None = None
    """The internal token (None: peers do not authenticate)."""
    _dial: Dialer = tcp_dialer
    """The dialer (TCP or TLS)."""

    @classmethod
    def from_config(cls, config: ServerConfig) -> PeerSecurity:
        """Derive the peer settings from ``[tls]`` and ``[auth]``.

        Raises:
            ConfigError: TLS files unusable, or auth enabled in a cluster without an
                internal token.
        """
        ctx = peer_context(config.tls)
        token = config.auth.resolved_internal_token()
        if config.auth.enabled and config.cluster.enabled and token is None:
            raise ConfigError(
                "[auth] enabled in a cluster needs internal_token or internal_token_file "
                "(servers authenticate to each other with it)"
            )
        creds = Credentials(token=token) if config.auth.enabled and token else None
        dial = tls_dialer(ctx, config.tls.peer_hostname) if ctx is not None else tcp_dialer
        return cls(ctx is not None, creds, dial)

    async def dial(self, address: Address, timeout_s: float) -> ByteStream:
        """Open a byte stream to a peer (TCP or TLS) within ``timeout_s`` seconds.

        Raises:
            JetConnectionError: not connected in time, refused, TLS handshake failed.
        """
        return await self._dial(address, timeout_s)

    async def authenticate(self, conn: Connection, timeout_s: float) -> None:
        """Authenticate ``conn`` as the internal identity (nothing to do without auth).

        Raises:
            JetError: Unauthenticated (tokens differ between servers), Timeout, ...
        """
        if self.credentials is not None:
            await authenticate(conn, self.credentials, timeout_s)


PLAIN = PeerSecurity()
"""No TLS, no authentication (the default)."""


def peer_security_of(controller: object) -> PeerSecurity:
    """The peer settings of a cluster controller (its ``peers`` pool), else :data:`PLAIN`."""
    security = getattr(getattr(controller, "peers", None), "security", None)
    return security if isinstance(security, PeerSecurity) else PLAIN
