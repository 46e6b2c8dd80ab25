"""``jet share status GROUP``: a share group's state per partition (spec/share-groups.md).

Reads the group's share log (``__share.<group>``) from its start with the SDK's state machine
and prints, per consumed partition: SPSO, SPEO and the stream's high watermark, and how many
offsets are acquired (held under a lease that has not run out), acked, pending (not finished
and not held: waiting for a claim, after a nack or a lease that ran out, or not claimed yet)
and dead-lettered; plus the members holding leases. Read-only: it joins nothing.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from jetsdk import Client, JetError
from jetsdk.consumer.share_consumer import read_share_group
from jetsdk.share.state import ACKED, ACQUIRED, DEAD, DEAD_PENDING, PartitionShare
from jetserver.cli.exit_codes import EXIT_FAILED, EXIT_OK
from jetserver.cli.stream_cmd import (
    _print_table,
    add_command_group,
    client_command,
    fail,
    print_json,
    run_with_client,
)

__all__ = ["partition_status", "register"]


def register(subparsers: Any) -> None:
    _, sub = add_command_group(
        subparsers,
        "share",
        help="share groups (queues on a stream)",
        description="Share groups.",
        metavar="COMMAND",
    )
    status = sub.add_parser(
        "status",
        help="a share group's state per partition",
        description="Acquired, acked, pending and dead-lettered counts per partition.",
    )
    status.add_argument("group", help="the share group")
    client_command(status, _status, json_help="print one JSON document")


def partition_status(ps: PartitionShare, hw: int, now_ns: int) -> dict[str, Any]:
    """Counts for one partition at server time ``now_ns`` (offsets below ``hw`` exist)."""
    acquired = acked_open = dead_open = 0
    holders: dict[str, int] = {}
    expired = 0
    for r in ps.ranges.values():
        for i, state in enumerate(r.states):
            if state == ACKED:
                acked_open += 1
            elif state == DEAD:
                dead_open += 1
            elif state in (ACQUIRED, DEAD_PENDING):
                lease = r.leases.get(r.owners[i])
                if lease is not None and now_ns <= r.deadline_at(i):
                    acquired += 1
                    holders[lease.holder] = holders.get(lease.holder, 0) + 1
                else:
                    expired += 1
    unfinished = max(0, hw - ps.spso) - acked_open - dead_open
    return {
        "spso": ps.spso,
        "speo": ps.speo,
        "hw": hw,
        "acquired": acquired,
        "acked": ps.acked_total,
        "pending": max(0, unfinished - acquired),
        "dead_lettered": ps.dead_total,
        "lease_ran_out": expired,
        "holders": holders,
    }


def _status(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        state = await read_share_group(client, args.group)
        if state is None:
            return fail(f"no share group {args.group!r} (no stream __share.{args.group})", 1)
        now_ns = max(state.clock, time.time_ns())
        out: dict[str, Any] = {"group": args.group, "records": state.last_offset + 1}
        parts: list[dict[str, Any]] = []
        for (stream, partition), ps in sorted(state.partitions.items()):
            try:
                hw = (await client.list_offsets(stream, partition, "latest")).hw
            except JetError as exc:  # e.g. the stream was deleted
                return fail(f"cannot read {stream}/{partition}: {exc}", EXIT_FAILED)
            parts.append(
                {"stream": stream, "partition": partition, **partition_status(ps, hw, now_ns)}
            )
        out["partitions"] = parts
        if args.json:
            print_json(out)
            return EXIT_OK
        print(f"share group: {args.group} ({out['records']} share-log records)")
        rows = [
            ["STREAM", "PARTITION", "SPSO", "HW", "ACQUIRED", "ACKED", "PENDING", "DEAD", "HOLDERS"]
        ]
        for p in parts:
            holders = ",".join(f"{m}:{n}" for m, n in sorted(p["holders"].items())) or "-"
            rows.append(
                [
                    p["stream"],
                    str(p["partition"]),
                    str(p["spso"]),
                    str(p["hw"]),
                    str(p["acquired"]),
                    str(p["acked"]),
                    str(p["pending"]),
                    str(p["dead_lettered"]),
                    holders,
                ]
            )
        _print_table(rows)
        return EXIT_OK

    return run_with_client(args, body)
