"""Client-side security: TLS contexts and dialers, credentials and the Authenticate step.

spec/protocol.md ("10 Authenticate", "TLS"): a client opens TCP, optionally wrapped in TLS,
sends Hello, then Authenticate when the server requires it (Hello answers
``"auth_required": true``) and the client was given credentials; the connection is usable
once the Authenticate answer arrived.

- :func:`tls_context` builds an ``ssl.SSLContext`` from file paths (CA bundle, client
  certificate and key); pass your own context to :class:`~jetsdk.client.Client` instead if
  you need more control.
- :func:`tls_dialer` returns a :data:`~jetsdk.transport.Dialer` that wraps TCP in TLS
  (hostname checked against ``server_hostname``, else the address's host).
- :class:`Credentials` holds a token or a user and password; :func:`authenticate` sends them.

Task safety: everything here is stateless or immutable.
"""

from __future__ import annotations

import ssl
from typing import Any

import anyio
import attrs

from jetsdk.codec.errors import CodecError
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.connection import Connection
from jetsdk.errors import InvalidArgument, JetConnectionError, MalformedFrame
from jetsdk.transport import Address, AnyioByteStream, ByteStream, Dialer, map_io_errors

__all__ = [
    "MECHANISM_PASSWORD",
    "MECHANISM_TLS",
    "MECHANISM_TOKEN",
    "Credentials",
    "authenticate",
    "tls_context",
    "tls_dialer",
]

MECHANISM_TOKEN = "token"
"""Authenticate with a bearer token."""
MECHANISM_PASSWORD = "password"
"""Authenticate with a user name and password."""
MECHANISM_TLS = "tls"
"""Authenticate as the verified client certificate's subject CN."""


@attrs.frozen
class Credentials:
    """What a client authenticates with: a token, or a user and password, or (``tls``) the
    client certificate it presented."""

    token: str | None = attrs.field(default=None, repr=False)
    """A bearer token (secret)."""
    user: str | None = None
    """User name (with ``password``)."""
    password: str | None = attrs.field(default=None, repr=False)
    """Password of ``user`` (secret)."""
    tls: bool = False
    """Ask the server to use the TLS client certificate's identity."""

    def __attrs_post_init__(self) -> None:
        given = sum(
            (self.token is not None, self.user is not None or self.password is not None, self.tls)
        )
        if given != 1:
            raise InvalidArgument(
                "give exactly one of: token, user + password, tls",
                details={"field": "credentials"},
            )
        if (self.user is None) != (self.password is None):
            raise InvalidArgument("user and password go together", details={"field": "credentials"})

    def request(self) -> dict[str, Any]:
        """The Authenticate request body (JSON object)."""
        if self.token is not None:
            return {"mechanism": MECHANISM_TOKEN, "token": self.token}
        if self.user is not None:
            return {"mechanism": MECHANISM_PASSWORD, "user": self.user, "password": self.password}
        return {"mechanism": MECHANISM_TLS}


async def authenticate(conn: Connection, credentials: Credentials, timeout: float) -> str:
    """Send Authenticate on ``conn``; return the identity the server assigned.

    Raises:
        Unauthenticated: bad credentials (the server closes the connection).
        JetError: any other error answer, Timeout, JetConnectionError.
    """
    body = encode_json(credentials.request())
    answer = await conn.request(Api.AUTHENTICATE, body, timeout=timeout)
    try:
        obj = decode_json(answer)
    except CodecError as exc:
        raise MalformedFrame(f"bad Authenticate answer: {exc}") from exc
    identity = obj.get("identity")
    if not isinstance(identity, str):
        raise MalformedFrame(f"Authenticate answer without identity: {obj!r}")
    return identity


def tls_context(
    ca: str | None = None, cert: str | None = None, key: str | None = None
) -> ssl.SSLContext:
    """A client TLS context: verify the server against ``ca`` (PEM file; None: the system
    store), and present ``cert`` + ``key`` (PEM files) if given.

    Raises:
        InvalidArgument: a file cannot be loaded.
    """
    try:
        ctx = ssl.create_default_context(cafile=ca)
        if cert is not None:
            ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidArgument(f"TLS files: {exc}", details={"field": "tls"}) from exc
    return ctx


def tls_dialer(context: ssl.SSLContext, server_hostname: str | None = None) -> Dialer:
    """A dialer that opens TCP and completes a TLS handshake within the timeout.

    Args:
        context: client context (:func:`tls_context` or your own).
        server_hostname: name checked against the server certificate (default: the host of
            the address dialed; an IP literal is checked against the certificate's IP SANs).
    """

    async def dial(address: Address, timeout: float) -> ByteStream:
        try:
            with anyio.fail_after(timeout), map_io_errors(f"TLS connect to {address}"):
                stream = await anyio.connect_tcp(
                    address.host,
                    address.port,
                    ssl_context=context,
                    tls_hostname=server_hostname or address.host,
                    # Do not wait for the peer's close_notify at close (bounded closes).
                    tls_standard_compatible=False,
                )
        except TimeoutError:
            raise JetConnectionError(
                f"TLS connect to {address}: timed out after {timeout}s"
            ) from None
        return AnyioByteStream(stream, label=str(address))

    return dial
