"""A share-group worker process for the real-process share tests (run as a script).

    python share_worker.py SERVERS STREAM GROUP OUT STOP --mode ack|hold|poison

Writes one line per message handed out, ``m partition offset delivery_count time``, flushed
at once. ``ack`` acks everything; ``hold`` acks nothing and stops asking after
``--hold-count`` messages (it is killed while holding them); ``poison`` nacks offsets with
``offset % 10 == 3`` and acks the rest. Runs until the file STOP exists, then flushes its
outcomes and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import IO

import anyio

from jetsdk import Client, ShareConsumer


async def run(args: argparse.Namespace, out: IO[str]) -> None:
    stop = Path(args.stop)
    async with (
        Client(args.servers.split(",")) as client,
        ShareConsumer(
            client,
            args.stream,
            group=args.group,
            ack_deadline=args.deadline,
            max_deliveries=args.max_deliveries,
            dead_letter_stream=args.dlq,
            batch=args.batch,
        ) as consumer,
    ):
        handed = 0
        while not stop.exists():  # noqa: ASYNC240 - a cheap stat, in a test worker
            msg = await consumer.next(timeout=0.2)
            if msg is None:
                continue
            out.write(f"m {msg.partition} {msg.offset} {msg.delivery_count} {time.time():.3f}\n")
            out.flush()
            if args.mode == "hold":
                handed += 1
                if handed >= args.hold_count:
                    while not stop.exists():  # noqa: ASYNC240, ASYNC110 - stuck: asks for no more
                        await anyio.sleep(0.1)
                continue
            if args.mode == "poison" and msg.offset % 10 == 3:
                await msg.nack()
            else:
                await msg.ack()
        await consumer.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("servers", "stream", "group", "out", "stop"):
        parser.add_argument(name)
    parser.add_argument("--mode", default="ack", choices=("ack", "hold", "poison"))
    parser.add_argument("--deadline", type=float, default=2.0)
    parser.add_argument("--max-deliveries", type=int, default=5)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--dlq", default=None)
    parser.add_argument("--hold-count", type=int, default=100)
    parser.add_argument("--backend", default="asyncio")
    args = parser.parse_args()
    with open(args.out, "a") as out:
        anyio.run(run, args, out, backend=args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
