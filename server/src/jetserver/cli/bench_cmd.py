"""``jet bench STREAM``: publish and consume on a stream and report rates and latencies,
modelled on ``nats bench``.

::

    jet bench bench --pub 2 --sub 2 --msgs 100000 --size 128 --ack leader
    jet bench bench --pub 1 --sub 3 --group ""           # a consumer group (fresh name)
    jet bench bench --latency --rate 2000 --msgs 20000   # end-to-end latency, paced
    jet bench bench --json --plot bench.png

The stream is created when it is missing (``--partitions``, ``--replicas``) and kept. A
progress bar is drawn on stderr when it is a terminal; the summary table (or ``--json``) goes
to stdout. Publishers are idempotent unless ``--no-idempotent``; at the end the run reads
back what the servers hold of it and prints duplicates and missing messages
(``--no-check`` skips it). Exit code 1 when a message was not acknowledged, not received in
time, or acknowledged and then missing from the servers; 2 when ``--size`` is over the
largest message the servers (or the stream) accept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio

from jetsdk import Client, JetError, StreamNotFound
from jetserver.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from jetserver.cli.progress import Progress
from jetserver.cli.security_opts import security_kwargs
from jetserver.cli.stream_cmd import (
    ACK_POLICIES,
    add_ack_option,
    client_command,
    fail,
    nonnegative_int,
    positive_float,
    positive_int,
    print_json,
    run_with_client,
)
from jetserver.observe.bench_check import largest_size, message_bytes
from jetserver.observe.bench_report import PlotUnavailable, summary_table, to_json, write_plot
from jetserver.observe.bench_run import BenchConfig, run_bench

DEFAULT_LATENCY_RATE = 1000.0


def register(subparsers: Any) -> None:
    """Add ``jet bench``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="benchmark publishing and consuming on a stream",
        description="Publish --msgs messages with --pub publishers and read them with --sub "
        "subscribers (each reads all, or share them in --group), then print msg/s, MB/s and "
        "latency percentiles. Creates STREAM if missing.",
    )
    p.add_argument("stream", metavar="STREAM")
    p.add_argument("--pub", type=nonnegative_int, default=1, help="publishers (default 1)")
    p.add_argument("--sub", type=nonnegative_int, default=0, help="subscribers (default 0)")
    p.add_argument("--msgs", type=positive_int, default=100_000, help="messages (default 100k)")
    p.add_argument("--size", type=nonnegative_int, default=128, help="bytes each (default 128)")
    add_ack_option(p)
    p.add_argument(
        "--rate", type=positive_float, help="total msg/s over all publishers (default: max)"
    )
    p.add_argument(
        "--group",
        metavar="NAME",
        help="consumer-group mode: the subscribers join group NAME and share the partitions "
        "('' for a fresh name); started at the partitions' current ends",
    )
    p.add_argument(
        "--latency",
        action="store_true",
        help=f"latency mode: linger 0, paced at --rate "
        f"(default {DEFAULT_LATENCY_RATE:g}/s); at least one subscriber",
    )
    p.add_argument(
        "--window",
        type=positive_int,
        default=4000,
        help="unacknowledged messages per publisher (default 4000)",
    )
    p.add_argument("--partitions", type=positive_int, default=1, help="if creating STREAM")
    p.add_argument("--replicas", type=positive_int, default=1, help="if creating STREAM")
    p.add_argument(
        "--timeout", type=positive_float, default=300.0, help="bound on the run (default 300 s)"
    )
    p.add_argument(
        "--no-idempotent",
        dest="idempotent",
        action="store_false",
        help="plain producers (default: idempotent, a retried batch is not stored twice)",
    )
    p.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip reading back what the servers hold at the end",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="save a latency histogram and throughput over time (needs matplotlib: "
        "pip install 'jetserver[plot]')",
    )
    client_command(p, _bench)


def _bench(args: argparse.Namespace) -> int:
    if args.pub < 1:
        return fail("--pub must be at least 1", EXIT_USAGE)
    subs = max(args.sub, 1) if args.latency else args.sub
    if args.group is not None and subs < 1:
        return fail("--group needs --sub 1 or more", EXIT_USAGE)
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return fail("--plot needs matplotlib: pip install 'jetserver[plot]'", EXIT_USAGE)
    rate = args.rate or (DEFAULT_LATENCY_RATE if args.latency else 0.0)
    cfg = BenchConfig(
        stream=args.stream,
        publishers=args.pub,
        subscribers=subs,
        msgs=args.msgs,
        size=args.size,
        ack=ACK_POLICIES[args.ack],
        rate=rate,
        group=args.group,
        latency=args.latency,
        partitions=args.partitions,
        replicas=args.replicas,
        timeout=args.timeout,
        max_pending=args.window,
        idempotent=args.idempotent,
        check=args.check,
    )
    kwargs = security_kwargs(args)

    def factory() -> Client:
        return Client(args.servers, connect_timeout=args.connect_timeout, **kwargs)

    async def body(client: Client) -> int:
        too_big = await _over_limit(client, cfg)
        if too_big is not None:
            return fail(too_big, EXIT_USAGE)
        progress = Progress(cfg.msgs * (1 + cfg.subscribers if cfg.group is None else 2))
        try:
            result = await run_bench(cfg, factory, progress.add)
        except BaseExceptionGroup as group:
            # One publisher's or subscriber's error (the first), not a traceback per task.
            first = _first_error(group)
            if first is None:
                raise
            return fail(f"{type(first).__name__}: {first}", EXIT_FAILED)
        finally:
            progress.close()
        report = to_json(result)
        if args.json:
            print_json(report)
        else:
            print(summary_table(report))
        if args.plot is not None:
            try:
                await anyio.to_thread.run_sync(write_plot, result, args.plot)
            except PlotUnavailable as exc:
                print(f"jet: {exc}", file=sys.stderr)
            else:
                if not args.json:
                    print(f"plot: {args.plot}")
        lost = result.check is not None and result.check.lost
        return EXIT_OK if result.complete and not lost else EXIT_FAILED

    return run_with_client(args, body)


async def _over_limit(client: Client, cfg: BenchConfig) -> str | None:
    """Why ``--size`` cannot be sent (over the servers' or the stream's
    max_message_bytes, identity header included), or None."""
    limit, where = client.max_message_bytes, "the servers' max_message_bytes"
    try:
        info = await client.describe_stream(cfg.stream)
    except StreamNotFound:
        info = None
    stream_limit = info.config.get("max_message_bytes") if info is not None else None
    if isinstance(stream_limit, int) and 0 < stream_limit < limit:
        limit, where = stream_limit, f"stream {cfg.stream}'s max_message_bytes"
    size = message_bytes(cfg.size)
    if size <= limit:
        return None
    return (
        f"--size {cfg.size} makes {size:,}-byte messages, over {where} ({limit}); "
        f"the largest --size accepted is {largest_size(limit)}"
    )


def _first_error(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found = _first_error(exc)
            if found is not None:
                return found
        elif isinstance(exc, JetError | OSError):
            return exc
    return None
