"""Micro-benchmark of the NATS read side: parsing only, no sockets (issue 31).

Prints microseconds per message for :class:`jetserver.natsproto.NatsReader` on runs of
``MSG`` (the ingest hot path) and of ``HMSG``, read in 64 KiB chunks as the server's
connection reads them. Usage: ``python tools/bench_nats_reader.py [--messages N]``.
"""

from __future__ import annotations

import argparse
import time

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
        started = time.perf_counter()
        got = 0
        for chunk in chunks:
            got += len(reader.feed(chunk))
        best = min(best, time.perf_counter() - started)
        assert got == count, got
    return best / count * 1e6


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
        us = bench(stream(n, payload, headers), n, args.rounds)
        print(f"NatsReader {name:>10}: {us:.3f} us/message (best of {args.rounds}, {n} messages)")


if __name__ == "__main__":
    main()
