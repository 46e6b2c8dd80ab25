"""``jet cluster status``: the servers of a cluster, its metadata leader, and per partition
the leader, epoch, replicas, ISR, high watermark and log end offset.

The metadata comes from any server; each listed server is then asked directly (a short
connect timeout), which tells whether it answers, and each partition's HW and LEO are the
ones its leader reports (the committed end). ``--json`` prints one object::

    {"metadata_leader": "s1",
     "servers": [{"id": "s1", "address": "...", "up": true}, ...],
     "partitions": [{"stream": "orders", "partition": 0, "leader": "s1", "leader_epoch": 3,
                     "replicas": [...], "isr": [...], "hw": 120, "leo": 121,
                     "offline": {server: reason}}, ...]}

Exit code 0 when every server answers and every partition has a leader, a full ISR and no
offline replica, 1 otherwise (so scripts doing a rolling restart can wait for 0 between two
servers).
"""

from __future__ import annotations

import argparse
from contextlib import AsyncExitStack
from typing import Any

from jetsdk import Client, JetError
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.metadata import ClusterMetadata, StreamInfo
from jetserver.cli.security_opts import security_kwargs
from jetserver.cli.stream_cmd import (
    EXIT_FAILED,
    EXIT_OK,
    add_client_options,
    print_json,
    run_with_client,
)

SERVER_CONNECT_TIMEOUT_S = 2.0
"""Bound on reaching one listed server."""


def register(subparsers: Any) -> None:
    """Add ``jet cluster status``."""
    cluster: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="inspect the cluster",
        description="Inspect a jet cluster.",
    )
    sub = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    sub.required = True
    status = sub.add_parser(
        "status",
        help="servers, metadata leader, partition leaders, ISRs and high watermarks",
        description="Show the servers (and whether each answers), the metadata leader, "
        "and per partition: leader, leader epoch, replicas, ISR, HW and LEO (as the leader "
        "reports them). Exit code 1 if a server does not answer or a partition has no "
        "leader or a partial ISR.",
    )
    status.add_argument("--json", action="store_true", help="print one JSON object")
    add_client_options(status)
    status.set_defaults(func=_status)


def _status(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        raw = decode_json(await client.request_any(Api.METADATA, encode_json({"streams": None})))
        meta = ClusterMetadata.from_json(raw)
        leader = raw.get("metadata_leader")
        up: dict[str, bool] = {}
        views: dict[str, dict[str, StreamInfo]] = {}
        async with AsyncExitStack() as stack:
            for sid, server in sorted(meta.servers.items()):
                try:
                    direct = await stack.enter_async_context(
                        Client(
                            [server.address],
                            connect_timeout=SERVER_CONNECT_TIMEOUT_S,
                            request_timeout=SERVER_CONNECT_TIMEOUT_S * 2,
                            **security_kwargs(args),
                        )
                    )
                    views[sid] = {
                        name: await direct.describe_stream(name) for name in sorted(meta.streams)
                    }
                    up[sid] = True
                except (JetError, OSError):
                    up[sid] = False
        report = _report(meta, leader if isinstance(leader, str) else None, up, views)
        if args.json:
            print_json(report)
        else:
            _print(report)
        return EXIT_OK if _healthy(report) else EXIT_FAILED

    return run_with_client(args, body)


def _report(
    meta: ClusterMetadata,
    metadata_leader: str | None,
    up: dict[str, bool],
    views: dict[str, dict[str, StreamInfo]],
) -> dict[str, Any]:
    partitions = []
    for name in sorted(meta.streams):
        for p in meta.streams[name].partitions:
            own = views.get(p.leader or "", {}).get(name)
            seen = own.partition(p.partition) if own is not None else None
            offline = {}
            for sid in p.replicas:
                view = views.get(sid, {}).get(name)
                part = view.partition(p.partition) if view is not None else None
                if part is not None and part.offline is not None:
                    offline[sid] = part.offline
            partitions.append(
                {
                    "stream": name,
                    "partition": p.partition,
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "hw": seen.hw if seen is not None else None,
                    "leo": seen.leo if seen is not None else None,
                    "offline": offline,
                }
            )
    return {
        "metadata_leader": metadata_leader,
        "servers": [
            {"id": sid, "address": s.address, "up": up.get(sid, False)}
            for sid, s in sorted(meta.servers.items())
        ],
        "partitions": partitions,
    }


def _healthy(report: dict[str, Any]) -> bool:
    return all(s["up"] for s in report["servers"]) and all(
        p["leader"] is not None and len(p["isr"]) == len(p["replicas"]) and not p["offline"]
        for p in report["partitions"]
    )


def _print(report: dict[str, Any]) -> None:
    print(f"metadata leader: {report['metadata_leader'] or '-'}")
    _table(
        [["SERVER", "ADDRESS", "STATUS"]]
        + [[s["id"], s["address"], "up" if s["up"] else "DOWN"] for s in report["servers"]]
    )
    if not report["partitions"]:
        print("no streams")
        return
    print()
    rows = [["STREAM", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "HW", "LEO"]]
    for p in report["partitions"]:
        isr = ",".join(p["isr"]) or "-"
        if len(p["isr"]) < len(p["replicas"]):
            isr += " (partial)"
        rows.append(
            [
                p["stream"],
                str(p["partition"]),
                p["leader"] or "NONE",
                str(p["leader_epoch"]),
                ",".join(p["replicas"]),
                isr,
                "-" if p["hw"] is None else str(p["hw"]),
                "-" if p["leo"] is None else str(p["leo"]),
            ]
        )
    _table(rows)
    for p in report["partitions"]:
        for sid, reason in sorted(p["offline"].items()):
            print(f"OFFLINE {p['stream']}/{p['partition']} on {sid}: {reason}")


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
