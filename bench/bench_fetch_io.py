"""Fetch I/O: os.sendfile vs pread + send, over loopback TCP, as the server writes responses.

Two measurements:

1. I/O path alone: the server's own writer (jetserver.protocol.socket_io.SocketIO on the
   asyncio backend) sends fetch-sized responses (40-byte frame+fetch header, then N record
   bytes from a page-cached segment-like file) to a reader in another process that drains the
   socket. Reported: MB/s and responses/s per mode and response size, and the ratio.
2. End to end (skipped if the storage engine is missing): a real server with a real nats-server,
   a stream filled with records, consumers fetching the whole log, with ``fetch.io`` set to
   each mode.

The server's default (``jetserver.config.DEFAULT_FETCH_IO``) was chosen from these figures.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import anyio

from jetserver.protocol.socket_io import READ_INLINE_MAX_BYTES, SocketIO

HEADER = b"\x00" * 40
FILE_BYTES = 64 * 1024 * 1024


def _drain(port: int, total: int, out: Connection) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    buf = bytearray(1024 * 1024)
    got = 0
    while got < total:
        n = sock.recv_into(buf)
        if n == 0:
            break
        got += n
    out.send(got)
    sock.close()


async def _serve_one(mode: str, fd: int, size: int, count: int) -> float:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    total = count * (len(HEADER) + size)
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("spawn").Process(target=_drain, args=(port, total, child))
    proc.start()
    conn, _ = listener.accept()
    listener.close()
    io = SocketIO(conn)
    io.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
    span = FILE_BYTES - size
    started = time.perf_counter()
    pos = 0
    for _ in range(count):
        if mode == "sendfile":
            await io.send_all(HEADER, more=True)
            await io.sendfile(fd, pos, size)
        else:
            if size <= READ_INLINE_MAX_BYTES:
                data = os.pread(fd, size, pos)
            else:
                data = await anyio.to_thread.run_sync(os.pread, fd, size, pos)
            await io.send_buffers([HEADER, data])
        pos = (pos + size) % span
    got = await anyio.to_thread.run_sync(parent.recv)
    elapsed = time.perf_counter() - started
    proc.join(10)
    io.close()
    assert got == total, (got, total)
    return elapsed


async def _measure_io(quick: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="jet-bench-fetch-") as tmp:
        path = Path(tmp) / "00000000000000000000.log"
        path.write_bytes(os.urandom(FILE_BYTES))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.pread(fd, FILE_BYTES, 0)  # warm the page cache
            volume = (64 if quick else 512) * 1024 * 1024
            print("I/O path: responses of N record bytes, loopback TCP, asyncio backend")
            print(
                f"{'size':>9} {'sendfile MB/s':>14} {'read MB/s':>10} {'ratio':>6}"
                f" {'sendfile resp/s':>16} {'read resp/s':>12}"
            )
            for size in (4 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024):
                count = max(200, volume // size)
                best: dict[str, float] = {}
                for _round in range(1 if quick else 3):
                    for mode in ("sendfile", "read"):
                        t = await _serve_one(mode, fd, size, count)
                        best[mode] = min(best.get(mode, t), t)
                mb = count * size / 1e6
                sf, rd = mb / best["sendfile"], mb / best["read"]
                print(
                    f"{size // 1024:>7}Ki {sf:>14.0f} {rd:>10.0f} {sf / rd:>6.2f}"
                    f" {count / best['sendfile']:>16.0f} {count / best['read']:>12.0f}",
                    flush=True,
                )
        finally:
            os.close(fd)


def run(quick: bool) -> None:
    """Print sendfile vs read+send throughput (I/O path, then end to end if possible)."""
    anyio.run(_measure_io, quick, backend="asyncio")
    try:
        from bench import _fetch_e2e
    except ImportError as exc:  # storage engine or server not available yet
        print(f"end to end: skipped ({exc})")
        return
    _fetch_e2e.run(quick)


if __name__ == "__main__":
    run(quick=False)
