"""A group consumer process for the multi-process group tests (run as a script).

    python group_worker.py SERVERS STREAM GROUP OUT STOP --backend asyncio|trio|sync

Consumes with auto-commit, writes one line per message to OUT (``m partition offset
delivery_count time``) and one per callback (``a|r|l partitions time``), flushing after each
batch (before asking for the next, which is when the batch counts as processed), until the
file STOP exists; then closes cleanly (final commit) and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import IO, Any

import anyio

from jetsdk import Client, sync
from jetsdk.consumer import Consumer
from jetsdk.group import StreamPartition
from jetsdk.group.member import MemberConfig
from jetsdk.message import Message


def _config(args: argparse.Namespace) -> MemberConfig:
    return MemberConfig(
        session_timeout=args.session,
        heartbeat_interval=args.heartbeat,
        release_timeout=args.session * 2,
        checkpoint_interval=5.0,
    )


def _writer(out: IO[str], tag: str) -> object:
    def note(parts: list[StreamPartition]) -> None:
        listed = ",".join(str(p.partition) for p in parts)
        out.write(f"{tag} {listed} {time.time():.3f}\n")
        out.flush()

    return note


def _record(out: IO[str], batch: list[Message], delay: float) -> None:
    now = time.time()
    for m in batch:
        out.write(f"m {m.partition} {m.offset} {m.delivery_count} {now:.3f}\n")
    if delay and batch:
        time.sleep(delay * len(batch))
    out.flush()


def _stopped(stop: Path) -> bool:
    return stop.exists()


def _consumer_options(args: argparse.Namespace, out: IO[str]) -> dict[str, Any]:
    """The consumer's arguments, the same for the async and the sync API."""
    return {
        "group": args.group,
        "streams": [args.stream],
        "group_config": _config(args),
        "auto_commit": args.auto_commit,
        "instance_id": args.instance,
        "on_assigned": _writer(out, "a"),
        "on_revoked": _writer(out, "r"),
        "on_lost": _writer(out, "l"),
    }


async def run_async(args: argparse.Namespace, out: IO[str]) -> None:
    stop = Path(args.stop)
    async with (
        Client(args.servers) as client,
        Consumer(client, **_consumer_options(args, out)) as consumer,
    ):
        while not _stopped(stop):
            _record(out, await consumer.fetch(max_records=50, timeout=0.2), args.delay)


def run_sync(args: argparse.Namespace, out: IO[str]) -> None:
    stop = Path(args.stop)
    with (
        sync.Client(args.servers) as client,
        sync.Consumer(client, **_consumer_options(args, out)) as consumer,
    ):
        while not stop.exists():
            _record(out, consumer.fetch(max_records=50, timeout=0.2), args.delay)


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("servers", "stream", "group", "out", "stop"):
        parser.add_argument(name)
    parser.add_argument("--backend", default="asyncio")
    parser.add_argument("--session", type=float, default=2.0)
    parser.add_argument("--heartbeat", type=float, default=0.2)
    parser.add_argument("--auto-commit", type=float, default=0.5)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--instance", default=None)
    args = parser.parse_args()
    with open(args.out, "a", buffering=1 << 16) as out:
        if args.backend == "sync":
            run_sync(args, out)
        else:
            anyio.run(run_async, args, out, backend=args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
