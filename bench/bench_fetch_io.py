"""Fetch I/O: os.sendfile vs pread + send, over loopback TCP, as the server writes responses.

Two measurements:

1. I/O path alone: the server's own writer (jetserver.protocol.socket_io.SocketIO on the
   asyncio backend) sends fetch-sized responses (40-byte frame+fetch header, then N record
   bytes from a page-cached segment-like file) to a reader in another process that drains the
   socket. Reported: MB/s and responses/s per mode and response size, and the ratio.
2. End to end (skipped if the storage engine is missing): a real server with a real nats-server,
   a stream filled with records, consumers fetching the whole log, with ``fetch.io`` set to
   each mode.

The server's default (``jetserver.config.server.DEFAULT_FETCH_IO``, sendfile) was chosen from these
figures; ``auto`` (read+send below ``fetch.sendfile_min_bytes``, sendfile above) and ``read``
stay available.
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

from jetserver.protocol.socket_io import SocketIO
from jetserver.storage.read_slice import READ_INLINE_MAX_BYTES

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


def _consume(address: str, stream: str, max_bytes: int, rounds: int, out: Connection) -> None:
    """Consumer process: fetch the whole partition ``rounds`` times with blocking sockets."""
    from jetsdk.codec.fetch_messages import (
        FetchRequest,
        decode_fetch_response,
        encode_fetch_request,
    )
    from jetsdk.codec.frames import Api, FrameDecoder, encode_frame
    from jetsdk.codec.record import HEADER_SIZE, peek_header

    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    decoder = FrameDecoder(64 * 1024 * 1024)
    total_bytes = records = fetches = 0
    started = time.perf_counter()
    for _ in range(rounds):
        offset = 0
        while True:
            req = FetchRequest(stream, 0, offset, max_bytes, 0)
            sock.sendall(encode_frame(Api.FETCH, fetches, encode_fetch_request(req)))
            fetches += 1
            while (frame := decoder.next_frame()) is None:
                decoder.feed(sock.recv(4 * 1024 * 1024))
            header, data = decode_fetch_response(frame.body)
            # Walk record headers only: the consumer's own decoding is not what is measured.
            last = None
            pos = 0
            while len(data) - pos >= HEADER_SIZE:
                rec_offset, _ts, _epoch, size = peek_header(data, pos)
                if len(data) - pos < size:
                    break
                last = rec_offset
                records += 1
                pos += size
            total_bytes += len(data)
            if last is None or last + 1 >= header.hw:
                break
            offset = last + 1
    out.send((time.perf_counter() - started, total_bytes, records, fetches))
    sock.close()


async def _e2e_mode(
    nats_url: str, data_dir: Path, mode: str, fill: int, value_size: int, quick: bool
) -> list[tuple[int, float, int, int, int]]:
    from jetsdk.codec.error_codes import AckPolicy
    from jetsdk.codec.frames import Api, FrameDecoder, encode_frame
    from jetsdk.codec.messages import (
        ProduceMessage,
        ProduceRequest,
        encode_json,
        encode_produce_request,
    )
    from jetserver.config.load import load_config
    from jetserver.server import Server

    config = load_config(
        None,
        {},
        {
            ("nats", "servers"): (nats_url,),
            ("server", "data_dir"): str(data_dir),
            ("listen", "port"): 0,
            ("fetch", "io"): mode,
            ("logging", "level"): "WARNING",
        },
    )
    server = Server(config)
    results: list[tuple[int, float, int, int, int]] = []
    async with anyio.create_task_group() as tg:
        address = await tg.start(server.run)
        if fill:
            host, port = address.rsplit(":", 1)
            stream = await anyio.connect_tcp(host, int(port))
            decoder = FrameDecoder()

            async def call(api: int, body: bytes) -> None:
                await stream.send(encode_frame(api, 1, body))
                while decoder.next_frame() is None:
                    decoder.feed(await stream.receive())

            await call(Api.CREATE_STREAM, encode_json({"name": "bench", "subject": "bench"}))
            batch = 500
            value = os.urandom(value_size)
            for i in range(0, fill, batch):
                policy = AckPolicy.ALL if i + batch >= fill else AckPolicy.LEADER
                req = ProduceRequest("bench", 0, policy, 60_000, (ProduceMessage(value),) * batch)
                await call(Api.PRODUCE, encode_produce_request(req))
            await stream.aclose()
        for max_bytes in (64 * 1024, 1024 * 1024):
            parent, child = multiprocessing.Pipe()
            ctx = multiprocessing.get_context("spawn")
            rounds = 1 if quick else 2
            proc = ctx.Process(target=_consume, args=(address, "bench", max_bytes, rounds, child))
            proc.start()
            elapsed, nbytes, nrecords, nfetches = await anyio.to_thread.run_sync(parent.recv)
            await anyio.to_thread.run_sync(proc.join, 10)
            results.append((max_bytes, elapsed, nbytes, nrecords, nfetches))
        server.request_stop()
    return results


async def _measure_e2e(quick: bool) -> None:
    from jetserver.testing import NatsServer

    fill = 20_000 if quick else 100_000
    value_size = 1000
    with (
        tempfile.TemporaryDirectory(prefix="jet-bench-e2e-") as tmp,
        NatsServer(work_dir=Path(tmp) / "nats") as nats,
    ):
        data = Path(tmp) / "data"
        print(
            f"end to end: {fill} records of {value_size} B value, one consumer process fetching "
            "the whole partition (max_wait 0), server fetch.io switched per run"
        )
        print(f"{'max_bytes':>9} {'mode':>9} {'MB/s':>7} {'records/s':>10} {'fetches/s':>10}")
        by_mode: dict[str, list[tuple[int, float, int, int, int]]] = {}
        modes = ("sendfile", "read", "auto")
        for i, mode in enumerate(modes * 2):
            rows = await _e2e_mode(nats.url, data, mode, fill if i == 0 else 0, value_size, quick)
            prev = by_mode.get(mode)
            # Keep the faster of the two runs per mode and size (less noise from neighbours).
            by_mode[mode] = (
                rows
                if prev is None
                else [min(a, b, key=lambda r: r[1]) for a, b in zip(prev, rows)]
            )
        for idx in range(2):
            for mode in modes:
                max_bytes, elapsed, nbytes, nrecords, nfetches = by_mode[mode][idx]
                print(
                    f"{max_bytes // 1024:>7}Ki {mode:>9} {nbytes / elapsed / 1e6:>7.0f}"
                    f" {nrecords / elapsed:>10.0f} {nfetches / elapsed:>10.0f}",
                    flush=True,
                )
            sf = by_mode["sendfile"][idx]
            rd = by_mode["read"][idx]
            print(f"{'':>9} {'ratio':>9} {(sf[2] / sf[1]) / (rd[2] / rd[1]):>7.2f} (sendfile/read)")


def run(quick: bool) -> None:
    """Print sendfile vs read+send throughput: the I/O path alone, then end to end."""
    anyio.run(_measure_io, quick, backend="asyncio")
    anyio.run(_measure_e2e, quick, backend="asyncio")


if __name__ == "__main__":
    run(quick=False)
