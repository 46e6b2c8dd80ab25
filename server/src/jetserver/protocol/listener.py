"""The TCP listener of the client protocol: accept connections, serve each in its own task.

``serve_tcp`` binds, reports the bound address through ``task_status.started(address)``,
then accepts until cancelled; ``serve`` accepts on a socket bound beforehand
(:func:`bind_listener`: the server learns its address before it builds what needs it).
Connections beyond ``max_connections`` get a TOO_MANY_REQUESTS error frame and are closed.
A connection's failure never reaches the listener or the other connections.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Awaitable, Callable

import anyio
import attrs
from anyio.abc import TaskStatus

from jetsdk.codec.error_codes import ErrorCode
from jetserver.config.server import LimitsConfig
from jetserver.logs import fields
from jetserver.protocol.connection import AcceptedConnection, Handler, error_reply
from jetserver.protocol.reply import AnswerAtOnce
from jetserver.protocol.socket_io import SocketIO

log = logging.getLogger(__name__)

_ACCEPT_ERROR_BACKOFF_S = 0.1


def bind_listener(host: str, port: int, backlog: int) -> socket.socket:
    """A non-blocking listening TCP socket on ``host:port`` (port 0: any free port).

    Raises:
        OSError: the address cannot be bound.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, socktype, proto, _canon, addr = infos[0]
    sock = socket.socket(family, socktype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def format_address(sock: socket.socket) -> str:
    """``host:port`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@attrs.define(eq=False)
class ProtocolListener:
    """Accepts client connections and serves them with ``handler``."""

    handler: Handler
    """Answers requests."""
    limits: LimitsConfig
    """Connection limits and timeouts."""
    sendfile_min_bytes: int = 1
    """Fetch records from this size on are sent with os.sendfile (see AcceptedConnection)."""
    setup: Callable[[socket.socket], Awaitable[tuple[SocketIO, Handler]]] | None = None
    """Per accepted socket: wrap it (TLS handshake) and give its handler (a session-bound
    one); None: plain socket and ``handler``."""
    at_once: AnswerAtOnce | None = None
    """Answers the common Produce request in its reader callback (None: every request
    in its task)."""
    connections: int = 0
    """Connections open now."""
    accepted: int = 0
    """Connections accepted since start."""
    refused: int = 0
    """Connections refused at accept (``max_connections`` reached)."""

    async def serve_tcp(
        self,
        host: str,
        port: int,
        backlog: int = 128,
        *,
        task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` and serve connections until cancelled.

        ``task_status.started(address)`` reports the bound ``host:port`` once listening.

        Raises:
            OSError: the address cannot be bound (before ``started``).
        """
        listener = bind_listener(host, port, backlog)
        task_status.started(format_address(listener))
        await self.serve(listener)

    async def serve(self, listener: socket.socket) -> None:
        """Serve connections on a bound listening socket (:func:`bind_listener`) until
        cancelled; closes it at the end."""
        try:
            address = format_address(listener)
            async with anyio.create_task_group() as tg:
                log.info("listening", extra=fields(address=address))
                while True:
                    try:
                        sock, _addr = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        await anyio.wait_readable(listener)
                        continue
                    except OSError as exc:
                        # EMFILE and friends: keep the listener alive and back off.
                        log.error(
                            "accept failed",
                            extra=fields(error=errno.errorcode.get(exc.errno or 0, str(exc))),
                        )
                        await anyio.sleep(_ACCEPT_ERROR_BACKOFF_S)
                        continue
                    self.accepted += 1
                    if self.connections >= self.limits.max_connections:
                        self.refused += 1
                        tg.start_soon(self._refuse, sock)
                        continue
                    tg.start_soon(self._serve, sock)
        finally:
            listener.close()

    async def _serve(self, sock: socket.socket) -> None:
        self.connections += 1
        try:
            if self.setup is not None:
                io, handler = await self.setup(sock)
            else:
                io, handler = SocketIO(sock), self.handler
            log.debug("client connected", extra=fields(peer=io.peer))
            conn = AcceptedConnection(
                io,
                handler,
                self.limits,
                sendfile_min_bytes=self.sendfile_min_bytes,
                at_once=self.at_once,
            )
            await conn.serve()
            log.debug("client gone", extra=fields(peer=io.peer, requests=conn.requests))
        except Exception as exc:  # e.g. the peer reset before we set socket options
            log.debug("connection setup failed", extra=fields(error=repr(exc)))
            sock.close()
        finally:
            self.connections -= 1

    async def _refuse(self, sock: socket.socket) -> None:
        try:
            io = SocketIO(sock)
        except OSError:
            sock.close()
            return
        reply = error_reply(
            0,
            0,
            ErrorCode.TOO_MANY_REQUESTS,
            f"connection limit of {self.limits.max_connections} reached",
        )
        try:
            with anyio.move_on_after(1.0):
                await io.send_all(reply.data)
        except OSError:
            pass
        finally:
            io.close()
