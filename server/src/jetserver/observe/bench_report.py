"""What ``jet bench`` prints: the summary table, the ``--json`` object and the ``--plot`` PNG.

Latency figures are milliseconds: for publishers, send to ack; for subscribers, send to
consume (end to end, on this process's monotonic clock). Rates are over each side's own
span (its first to its last message), aggregates over the span of the whole side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jetserver.errors import JetServerError
from jetserver.observe.bench_run import STEP_S, BenchResult, SideStats

PLOT_POINTS = 40
"""Points of the throughput-over-time line."""
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999))


class PlotUnavailable(JetServerError, RuntimeError):
    """matplotlib is not installed (``pip install 'jetserver[plot]'``)."""


def percentile(sorted_values: list[int], q: float) -> float:
    """The ``q`` quantile of sorted values (nearest rank), 0 for none."""
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, int(q * len(sorted_values) + 0.5) - 1))
    return float(sorted_values[index])


def _span_s(stats: list[SideStats], start_ns: int) -> float:
    lasts = [s.last_ns for s in stats if s.last_ns is not None]
    if not lasts:
        return 0.0
    return max(1e-9, (max(lasts) - start_ns) / 1e9)


def side_summary(stats: list[SideStats], start_ns: int) -> dict[str, Any]:
    """Count, bytes, seconds, msg/s, MB/s and latency percentiles (ms) of ``stats``."""
    count = sum(s.count for s in stats)
    size = sum(s.bytes for s in stats)
    seconds = _span_s(stats, start_ns)
    latencies = sorted(v for s in stats for v in s.latencies_ns)
    return {
        "msgs": count,
        "bytes": size,
        "errors": sum(s.errors for s in stats),
        "seconds": round(seconds, 6),
        "msg_per_s": round(count / seconds, 1) if seconds > 0 else 0.0,
        "mb_per_s": round(size / seconds / 1e6, 3) if seconds > 0 else 0.0,
        "latency_ms": {name: round(percentile(latencies, q) / 1e6, 3) for name, q in PERCENTILES},
        "latency_samples": len(latencies),
    }


def to_json(result: BenchResult) -> dict[str, Any]:
    """The ``--json`` object."""
    cfg = result.config
    return {
        "stream": cfg.stream,
        "config": {
            "publishers": cfg.publishers,
            "subscribers": cfg.subscribers,
            "msgs": cfg.msgs,
            "size": cfg.size,
            "ack": cfg.ack.name.lower(),
            "rate": cfg.rate,
            "group": result.group,
            "latency_mode": cfg.latency,
            "partitions": cfg.partitions,
            "replicas": cfg.replicas,
            "idempotent": cfg.idempotent,
        },
        "complete": result.complete,
        "check": result.check.as_json() if result.check is not None else None,
        "seconds": round((result.end_ns - result.start_ns) / 1e9, 6),
        "pub": side_summary(result.publishers, result.start_ns),
        "sub": side_summary(result.subscribers, result.start_ns),
        "unique_received": result.unique_received,
        "publishers": [
            {"name": s.name, **side_summary([s], result.start_ns)} for s in result.publishers
        ],
        "subscribers": [
            {"name": s.name, **side_summary([s], result.start_ns)} for s in result.subscribers
        ],
    }


def summary_table(report: dict[str, Any]) -> str:
    """The human summary: one line per side and per publisher/subscriber."""
    cfg = report["config"]
    mode = "latency" if cfg["latency_mode"] else ("group " + cfg["group"] if cfg["group"] else "")
    head = (
        f"jet bench {report['stream']}: {cfg['msgs']:,} msgs of {cfg['size']} B, "
        f"{cfg['publishers']} pub, {cfg['subscribers']} sub, ack {cfg['ack']}"
        + (f", rate {cfg['rate']:,.0f}/s" if cfg["rate"] else "")
        + (f", {mode}" if mode else "")
        + f", {cfg['partitions']} partition(s) x{cfg['replicas']}"
    )
    rows = [["", "MSGS", "MSG/S", "MB/S", "P50 ms", "P90 ms", "P99 ms", "P999 ms"]]

    def row(name: str, s: dict[str, Any]) -> list[str]:
        lat = s["latency_ms"]
        have = s["latency_samples"] > 0
        return [
            name,
            f"{s['msgs']:,}",
            f"{s['msg_per_s']:,.0f}",
            f"{s['mb_per_s']:,.2f}",
            *((f"{lat[k]:.3f}" if have else "-") for k, _ in PERCENTILES),
        ]

    pub_label = "Pub (send->sent)" if cfg["ack"] == "none" else "Pub (send->ack)"
    rows.append(row(pub_label, report["pub"]))
    if len(report["publishers"]) > 1:
        rows.extend(row("  " + p["name"], p) for p in report["publishers"])
    if report["subscribers"]:
        rows.append(row("Sub (send->recv)", report["sub"]))
        if len(report["subscribers"]) > 1:
            rows.extend(row("  " + s["name"], s) for s in report["subscribers"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head]
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    check = report.get("check")
    if check is not None:
        lines.append(
            f"check: the servers hold {check['distinct']:,} of this run's messages: "
            f"{check['duplicates']:,} duplicates, {check['missing_acked']:,} missing "
            f"acknowledged (lost), {check['missing_unacked']:,} missing unacknowledged"
            + (f", {check['foreign']:,} other records" if check["foreign"] else "")
        )
        if check["missing_acked"]:
            lines.append(f"LOST: {check['missing_acked']:,} acknowledged message(s) missing")
    if not report["complete"]:
        lines.append(
            f"INCOMPLETE: {report['pub']['msgs']:,} acked, {report['pub']['errors']:,} failed, "
            f"{report['unique_received']:,} received of {cfg['msgs']:,}"
        )
    return "\n".join(lines)


def write_plot(result: BenchResult, path: Path) -> None:
    """A PNG: the latency histograms (left) and throughput over time (right).

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotUnavailable(
            "--plot needs matplotlib: pip install 'jetserver[plot]' (or matplotlib)"
        ) from exc
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, stats in (
        ("publish (send->ack)", result.publishers),
        ("consume (send->recv)", result.subscribers),
    ):
        values = [v / 1e6 for s in stats for v in s.latencies_ns]
        if values:
            left.hist(values, bins=60, alpha=0.6, label=label)
    left.set_xlabel("latency (ms)")
    left.set_ylabel("messages")
    left.set_title("latency histogram")
    left.legend(loc="upper right")
    for label, stats in (
        ("published (acked)", result.publishers),
        ("consumed", result.subscribers),
    ):
        buckets: dict[int, int] = {}
        for s in stats:
            for step, n in s.buckets.items():
                buckets[step] = buckets.get(step, 0) + n
        if buckets:
            # About PLOT_POINTS points whatever the run's length (STEP_S buckets merged).
            merge = max(1, round((max(buckets) + 1) / PLOT_POINTS))
            merged: dict[int, int] = {}
            for step, n in buckets.items():
                merged[step // merge] = merged.get(step // merge, 0) + n
            xs = range(0, max(merged) + 1)
            width = STEP_S * merge
            right.plot([k * width for k in xs], [merged.get(k, 0) / width for k in xs], label=label)
    right.set_xlabel("seconds since start")
    right.set_ylabel("msg/s")
    right.set_title("throughput over time")
    right.legend(loc="best")
    fig.suptitle(f"jet bench {result.config.stream}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
