"""``jet cluster status``: the servers of a cluster, its metadata leader, and per partition
the leader, epoch, replicas, ISR, high watermark and log end offset.

The metadata comes from any server; each listed server is then asked directly (a short
connect timeout), which tells whether it answers, and each partition's HW and LEO are the
ones its leader reports (the committed end). ``--json`` prints one object::

    {"metadata_leader": "s1",
     "servers": [{"id": "s1", "address": "...", "up": true}, ...],
     "partitions": [{"stream": "orders", "partition": 0, "leader": "s1", "leader_epoch": 3,
                     "replicas": [...], "isr": [...], "hw": 120, "leo": 121,
                     "state": "ok" | "under-replicated" | "offline",
                     "offline_reason": null | "leader s3 does not answer",
                     "internal": false, "offline": {server: reason}}, ...],
     "counts": {"partitions": 5, "offline": 1, "under_replicated": 2,
                "internal": {"partitions": 16, "offline": 0, "under_replicated": 0}}}

A partition is offline when it has no live leader as the cluster's liveness view finds it
(spec/cluster.md, "Partition health"); ``offline`` lists the replicas that cannot open on
their server. The servers are asked at once, each within its own bound. The counts are
those of user streams, the internal ones apart.

``jet cluster rebalance`` moves partition leaderships back to their preferred (first)
replicas (RebalanceLeaders; spec/cluster.md, "Preferred leaders"), one bounded round per
call, repeated with ``--all`` until none is due (at most ``MAX_REBALANCE_ROUNDS`` rounds).

Exit code 0 when every server answers and every partition has a leader, a full ISR and no
offline replica, 1 otherwise (so scripts doing a rolling restart can wait for 0 between two
servers).
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from jetsdk import Client, JetError
from jetsdk.admin import MAX_REBALANCE, LeaderRebalance, rebalance_leaders
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import decode_json, encode_json
from jetsdk.metadata import ClusterMetadata, StreamInfo
from jetserver.cli.exit_codes import EXIT_FAILED, EXIT_OK
from jetserver.cli.security_opts import security_kwargs
from jetserver.cli.stream_cmd import add_command_group, client_command, print_json, run_with_client

SERVER_CONNECT_TIMEOUT_S = 2.0
"""Bound on reaching one listed server."""
MAX_REBALANCE_ROUNDS = 100
"""Most rounds ``jet cluster rebalance --all`` runs."""


def register(subparsers: Any) -> None:
    """Add ``jet cluster status``."""
    _, sub = add_command_group(
        subparsers, "cluster", help="inspect the cluster", description="Inspect a jet cluster."
    )
    status = sub.add_parser(
        "status",
        help="servers, metadata leader, partition leaders, ISRs and high watermarks",
        description="Show the servers (and whether each answers), the metadata leader, "
        "and per partition: leader, leader epoch, replicas, ISR, HW and LEO (as the leader "
        "reports them). Exit code 1 if a server does not answer or a partition has no "
        "leader or a partial ISR.",
    )
    client_command(status, _status, json_help="print one JSON object")
    rebalance = sub.add_parser(
        "rebalance",
        help="move partition leaderships back to their preferred replicas",
        description="Elect each partition's preferred (first) replica as its leader where "
        "it is in the ISR and answers (the metadata leader also does this every few seconds "
        "unless auto_leader_rebalance is off). One bounded round; --all repeats until none "
        "is due. Exit code 1 if elections were refused or partitions remain due.",
    )
    rebalance.add_argument(
        "--max", type=int, default=None, help=f"most leaderships per round (1..{MAX_REBALANCE})"
    )
    rebalance.add_argument("--all", action="store_true", help="repeat until none is due")
    client_command(rebalance, _rebalance, json_help="print one JSON object")


def _rebalance(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        moved = refused = rounds = 0
        result = LeaderRebalance(0, 0, 0)
        while rounds < MAX_REBALANCE_ROUNDS:
            result = await rebalance_leaders(client, args.max)
            rounds += 1
            moved += result.moved
            refused += result.refused
            if not args.all or result.remaining == 0 or result.moved == 0:
                break
        report = {"moved": moved, "refused": refused, "remaining": result.remaining}
        if args.json:
            print_json({**report, "rounds": rounds})
        else:
            print(
                f"moved {moved} leadership(s) to their preferred replicas in {rounds} round(s); "
                f"{refused} refused, {result.remaining} still due"
            )
        return EXIT_OK if refused == 0 and result.remaining == 0 else EXIT_FAILED

    return run_with_client(args, body)


def _status(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        raw = decode_json(await client.request_any(Api.METADATA, encode_json({"streams": None})))
        meta = ClusterMetadata.from_json(raw)
        leader = raw.get("metadata_leader")
        up: dict[str, bool] = {}
        views: dict[str, dict[str, StreamInfo]] = {}

        async def visit(sid: str, address: str) -> None:
            up[sid] = False
            with anyio.move_on_after(SERVER_CONNECT_TIMEOUT_S * 2):
                try:
                    async with Client(
                        [address],
                        connect_timeout=SERVER_CONNECT_TIMEOUT_S,
                        request_timeout=SERVER_CONNECT_TIMEOUT_S * 2,
                        **security_kwargs(args),
                    ) as direct:
                        views[sid] = {
                            name: await direct.describe_stream(name)
                            for name in sorted(meta.streams)
                        }
                        up[sid] = True
                except (JetError, OSError):
                    pass

        async with anyio.create_task_group() as tg:
            for sid, server in sorted(meta.servers.items()):
                tg.start_soon(visit, sid, server.address)
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
                    "state": p.state,
                    "offline_reason": p.offline,
                    "internal": meta.streams[name].internal,
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
        "counts": {
            **_counts([p for p in partitions if not p["internal"]]),
            "internal": _counts([p for p in partitions if p["internal"]]),
        },
    }


def _counts(partitions: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "partitions": len(partitions),
        "offline": sum(1 for p in partitions if p["state"] == "offline"),
        "under_replicated": sum(1 for p in partitions if p["state"] != "ok"),
    }


def _healthy(report: dict[str, Any]) -> bool:
    return all(s["up"] for s in report["servers"]) and all(
        p["state"] == "ok" and not p["offline"] for p in report["partitions"]
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
    rows = [["STREAM", "PARTITION", "STATE", "LEADER", "EPOCH", "REPLICAS", "ISR", "HW", "LEO"]]
    for p in report["partitions"]:
        isr = ",".join(p["isr"]) or "-"
        if len(p["isr"]) < len(p["replicas"]):
            isr += " (partial)"
        rows.append(
            [
                p["stream"],
                str(p["partition"]),
                p["state"].upper() if p["state"] == "offline" else p["state"],
                p["leader"] or "NONE",
                str(p["leader_epoch"]),
                ",".join(p["replicas"]),
                isr,
                "-" if p["hw"] is None else str(p["hw"]),
                "-" if p["leo"] is None else str(p["leo"]),
            ]
        )
    _table(rows)
    c, ci = report["counts"], report["counts"]["internal"]
    print(
        f"\n{c['partitions']} partition(s): {c['offline']} offline, "
        f"{c['under_replicated']} under-replicated; internal: {ci['partitions']} "
        f"partition(s), {ci['offline']} offline, {ci['under_replicated']} under-replicated"
    )
    for p in report["partitions"]:
        if p["offline_reason"] is not None:
            print(f"OFFLINE {p['stream']}/{p['partition']}: {p['offline_reason']}")
        for sid, reason in sorted(p["offline"].items()):
            print(f"OFFLINE {p['stream']}/{p['partition']} on {sid}: {reason}")


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
