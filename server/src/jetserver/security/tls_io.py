"""TLS for the client protocol listener: contexts, and :class:`TlsSocketIO`, a
:class:`~jetserver.protocol.socket_io.SocketIO` that encrypts with ``ssl.SSLObject``.

The connection code owns a non-blocking socket and waits for readiness with anyio (which
works on asyncio and trio alike); TLS sits between it and the socket as a sans-I/O
``SSLObject`` over two memory BIOs. ``sendfile`` cannot bypass encryption: file bytes are
read (``os.pread``) and written through TLS.

Task safety: one reader task and one writer at a time, as for SocketIO; the raw socket
writes of both (handshake/alert bytes produced while reading, records while writing) go
through one lock so TLS records are never interleaved.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from jetserver.errors import ConfigError
from jetserver.protocol.socket_io import RECV_BYTES, SocketIO
from jetserver.security.config import TlsConfig

TLS_WRITE_CHUNK = 64 * 1024
"""Plaintext bytes encrypted per write call."""
PREAD_INLINE_MAX = 1024 * 1024
"""File slices up to this size are read on the event loop (page cache); bigger ones in a
worker thread, chunk by chunk."""


def server_context(cfg: TlsConfig) -> ssl.SSLContext:
    """The listener's context (TLS 1.2+), verifying client certificates per ``client_auth``.

    Raises:
        ConfigError: a certificate, key or CA file cannot be loaded.
    """
    assert cfg.cert is not None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cfg.cert, cfg.key)
        if cfg.client_auth != "none":
            ctx.load_verify_locations(cafile=cfg.ca)
            ctx.verify_mode = (
                ssl.CERT_REQUIRED if cfg.client_auth == "required" else ssl.CERT_OPTIONAL
            )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"[tls] cannot load certificate files: {exc}") from None
    return ctx


def common_name(cert: Mapping[str, Any] | None) -> str | None:
    """The subject CN of a certificate as ``SSLObject.getpeercert()`` returns it."""
    if not cert:
        return None
    subject = cert.get("subject")
    if not isinstance(subject, tuple):
        return None
    for rdn in subject:
        for key, value in rdn:
            if key == "commonName" and isinstance(value, str):
                return value
    return None


class TlsSocketIO(SocketIO):
    """A server-side TLS connection over a non-blocking socket (handshake: :meth:`start`)."""

    __slots__ = ("_incoming", "_outgoing", "_send_lock", "_tls")

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        """Wrap ``sock`` (owned from now on); nothing is exchanged before :meth:`start`."""
        super().__init__(sock)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._send_lock = anyio.Lock()

    async def start(self) -> None:
        """Complete the handshake.

        Raises:
            ssl.SSLError: the handshake failed (bad or missing client certificate...).
            OSError: the peer went away.
        """
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise ConnectionResetError("peer closed during the TLS handshake") from None
            except ssl.SSLError:
                await self._flush()  # send the alert, so the peer sees why
                raise
        await self._flush()

    def peer_common_name(self) -> str | None:
        """Subject CN of the verified client certificate (None: none sent/verified)."""
        return common_name(self._tls.getpeercert())

    async def _flush(self) -> None:
        async with self._send_lock:
            data = self._outgoing.read()
            if data:
                await SocketIO.send_all(self, data)

    async def _fill(self) -> bool:
        data = await SocketIO.recv(self, RECV_BYTES)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    def recv_now(self, max_bytes: int = RECV_BYTES) -> bytes | None:
        """Always None: TLS records go through :meth:`recv`."""
        return None

    def send_now(self, data: bytes | memoryview, *, more: bool = False) -> int:
        """Always 0: TLS records go through :meth:`send_all`."""
        return 0

    def sendfile_now(self, fileno: int, offset: int, count: int) -> int:
        """Always 0: file bytes are encrypted by :meth:`sendfile`."""
        return 0

    async def recv(self, max_bytes: int = RECV_BYTES) -> bytes:
        """Decrypted bytes; ``b""`` at end of stream (close_notify or EOF)."""
        while True:
            try:
                return self._tls.read(max_bytes)
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    return b""
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def recv_within(self, seconds: float, max_bytes: int = RECV_BYTES) -> bytes | None:
        """Decrypted bytes as :meth:`recv`; None if none came within ``seconds``."""
        with anyio.move_on_after(seconds):
            return await self.recv(max_bytes)
        return None

    async def recv_into_within(self, target: memoryview, seconds: float) -> int | None:
        """Decrypted bytes into ``target`` (copied from :meth:`recv_within`'s: the TLS
        object decrypts into its own buffers)."""
        data = await self.recv_within(seconds, len(target))
        if data is None:
            return None
        target[: len(data)] = data
        return len(data)

    async def send_all(self, data: bytes | memoryview, *, more: bool = False) -> None:
        """Encrypt and send every byte of ``data``."""
        view = memoryview(data).cast("B")
        while view:
            written = self._tls.write(view[:TLS_WRITE_CHUNK])
            view = view[written:]
            await self._flush()

    async def send_buffers(self, buffers: Sequence[bytes | memoryview]) -> None:
        """Send several buffers back to back."""
        await self.send_all(b"".join(buffers))

    async def sendfile(self, fileno: int, offset: int, count: int) -> None:
        """Send ``count`` bytes of file ``fileno`` from ``offset`` (read, then encrypted).

        Raises:
            OSError: socket error, or EOF before ``count`` bytes.
        """
        while count > 0:
            size = min(count, PREAD_INLINE_MAX)
            if size < PREAD_INLINE_MAX:
                chunk = os.pread(fileno, size, offset)
            else:
                chunk = await anyio.to_thread.run_sync(os.pread, fileno, size, offset)
            if not chunk:
                raise OSError("file ended before the requested range was sent")
            await self.send_all(chunk)
            offset += len(chunk)
            count -= len(chunk)
