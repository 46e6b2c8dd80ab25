"""Micro-benchmark of the NATS read side: parsing only, no sockets (issue 31).

Prints microseconds per message for :class:`jetserver.natsproto.NatsReader` on runs of
``MSG`` (the ingest hot path) and of ``HMSG``, read in 64 KiB chunks as the server's
connection reads them, and for :class:`jetserver.natslink.read.JetParser` (the reader and its
dispatch to a no-op direct subscription). CPU time of this process, best of the rounds.
Usage: ``python tools/bench_nats_reader.py [--messages N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from jetserver.natslink.read import JetParser
from jetserver.natsproto import NatsReader

CHUNK = 64 * 1024


def stream(count: int, payload: bytes, headers: bytes) -> list[bytes]:
    if headers:
        one = b"HMSG orders.eu 5 %d %d\r\n%b%b\r\n" % (
            len(headers),
            len(headers) + len(payload),
            headers,
            payload,
        )
    else:
        one = b"MSG orders.eu 5 %d\r\n%b\r\n" % (len(payload), payload)
    data = one * count
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def bench(chunks: list[bytes], count: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        reader = NatsReader()
        started = time.process_time()
        got = 0
        for chunk in chunks:
            got += len(reader.feed(chunk))
        best = min(best, time.process_time() - started)
        assert got == count, got
    return best / count * 1e6


class _NoOpDirect:
    skip = None

    def push(self, subject: bytes, reply: bytes, data: bytes) -> None:
        pass


class _Client:
    """What JetParser uses of the nats-py client: one direct subscription, sid 5."""

    def __init__(self) -> None:
        self._jet_direct = {5: _NoOpDirect()}
        self._subs = {5: object()}
        self.stats = {"in_msgs": 0, "in_bytes": 0}

    async def _process_msg(self, *args: Any) -> None:
        pass


def bench_dispatch(chunks: list[bytes], count: int, rounds: int) -> float:
    """JetParser (reader and dispatch to a no-op direct subscription), per message."""

    async def run() -> float:
        parser = JetParser(_Client())
        started = time.process_time()
        for chunk in chunks:
            await parser.parse(chunk)
        return time.process_time() - started

    return min(asyncio.run(run()) for _ in range(rounds)) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n = args.messages
    for name, payload, headers in (
        ("MSG 100 B", b"x" * 100, b""),
        ("MSG 1 KiB", b"x" * 1024, b""),
        ("HMSG 100 B", b"x" * 100, b"NATS/1.0\r\nNats-Msg-Id: 1234567\r\n\r\n"),
    ):
        chunks = stream(n, payload, headers)
        us = bench(chunks, n, args.rounds)
        print(f"NatsReader {name:>10}: {us:.3f} us/message (best of {args.rounds}, {n} messages)")
        if not headers:
            us = bench_dispatch(chunks, n, args.rounds)
            print(f"JetParser  {name:>10}: {us:.3f} us/message (reader + dispatch, no-op sink)")


if __name__ == "__main__":
    main()
