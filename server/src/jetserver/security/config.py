"""The ``[tls]`` and ``[auth]`` configuration sections (both off by default).

TOML::

    [tls]
    cert = "server.pem"          # PEM certificate chain; with key: TLS on the listener
    key = "server.key"
    ca = "ca.pem"                # verify client certificates (and peers) against this CA
    client_auth = "none"         # "none", "optional" or "required" client certificates
    peer_ca = "ca.pem"           # CA for server-to-server connections (default: ca)
    peer_cert = "peer.pem"       # certificate presented to other servers (default: cert)
    peer_key = "peer.key"
    peer_hostname = ""           # name checked on peers' certificates (default: their host)

    [auth]
    enabled = false
    users = ["alice=scrypt$16384$8$1$<salt>$<hash>"]   # from `jet passwd`
    tokens = ["ci=sha256$<hex>"]                        # from `jet passwd --token`
    tls_identity = false         # a verified client certificate authenticates as its CN
    internal_token = "..."       # servers authenticate to each other with it (>= 16 chars)
    internal_token_file = "..."
    acls = ["alice:publish,fetch:orders.*", "ops:admin:*", "etl:group:etl-*"]

In ``JET_AUTH_ACLS`` (comma-separated entries) join permissions with ``+``:
``JET_AUTH_ACLS="ops:admin:*,alice:publish+fetch:orders.*"``.

``acls`` are bootstrap grants: at start a server proposes them for every identity that has
no entry in the replicated metadata yet (later changes are made with ``jet acl``).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from jetserver.config.validators import one_of
from jetserver.errors import ConfigError

CLIENT_AUTH_CHOICES = ("none", "optional", "required")
MIN_INTERNAL_TOKEN_CHARS = 16
"""Shortest accepted internal token (it grants full rights)."""


@attrs.frozen
class TlsConfig:
    """TLS on the client protocol listener and on connections to other servers."""

    cert: str | None = None
    """PEM certificate (chain) of the listener; TLS is on when ``cert`` and ``key`` are set."""
    key: str | None = None
    """PEM private key of ``cert``."""
    ca: str | None = None
    """PEM CA bundle that client certificates (and peers' server certificates) are checked
    against."""
    client_auth: str = attrs.field(default="none", validator=one_of(*CLIENT_AUTH_CHOICES))
    """Client certificates: ``none`` (not asked), ``optional`` (verified if sent),
    ``required`` (the handshake fails without a valid one)."""
    peer_ca: str | None = None
    """CA for verifying other servers (default: ``ca``; None and no ``ca``: system store)."""
    peer_cert: str | None = None
    """Certificate presented to other servers (default: ``cert``)."""
    peer_key: str | None = None
    """Key of ``peer_cert`` (default: ``key``)."""
    peer_hostname: str | None = None
    """Name checked on peers' certificates (default: the host of the peer's address)."""

    def __attrs_post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ConfigError("cert and key go together")
        if self.client_auth != "none" and self.ca is None:
            raise ConfigError(
                "client_auth needs ca (the CA client certificates are checked against)"
            )
        if self.client_auth != "none" and self.cert is None:
            raise ConfigError("client_auth needs cert and key (TLS on the listener)")

    @property
    def enabled(self) -> bool:
        """True if the listener speaks TLS."""
        return self.cert is not None


@attrs.frozen
class AuthConfig:
    """Authentication (who) and the bootstrap part of authorization (what)."""

    enabled: bool = False
    """Require authentication on every client connection."""
    users: tuple[str, ...] = ()
    """``identity=<password hash>`` entries (hashes from ``jet passwd``)."""
    tokens: tuple[str, ...] = ()
    """``identity=<token hash>`` entries (hashes from ``jet passwd --token``)."""
    tls_identity: bool = False
    """A verified client certificate authenticates the connection as its subject CN."""
    internal_token: str | None = attrs.field(default=None, repr=False)
    """Shared secret servers authenticate to each other with (identity ``__internal``,
    every right). Required in a cluster when ``enabled``."""
    internal_token_file: str | None = None
    """File holding ``internal_token`` (first line)."""
    acls: tuple[str, ...] = ()
    """Bootstrap grants ``identity:perm[,perm...]:pattern`` (see the module docstring)."""

    def __attrs_post_init__(self) -> None:
        from jetserver.security.grants import parse_grant_spec
        from jetserver.security.passwords import parse_entry

        for entry in (*self.users, *self.tokens):
            parse_entry(entry)
        for spec in self.acls:
            parse_grant_spec(spec)
        token = self.internal_token
        if token is not None and len(token) < MIN_INTERNAL_TOKEN_CHARS:
            raise ConfigError(f"internal_token must have >= {MIN_INTERNAL_TOKEN_CHARS} characters")

    def resolved_internal_token(self) -> str | None:
        """``internal_token``, else the first line of ``internal_token_file``.

        Raises:
            ConfigError: the file cannot be read or holds a short token.
        """
        if self.internal_token is not None:
            return self.internal_token
        if self.internal_token_file is None:
            return None
        try:
            text = Path(self.internal_token_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"internal_token_file: {exc.strerror}") from None
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
        if len(token) < MIN_INTERNAL_TOKEN_CHARS:
            raise ConfigError(f"internal_token must have >= {MIN_INTERNAL_TOKEN_CHARS} characters")
        return token
