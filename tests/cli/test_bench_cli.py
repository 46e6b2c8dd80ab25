"""`jet bench` as a subprocess against the module's `jet dev`: the JSON counts match what was
sent and what the servers stored, a consumer group ends with its offsets committed at the
end, the plot is a PNG, and a missing matplotlib is explained."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from jetsdk import Client, StreamPartition
from jetsdk.consumer.group_admin import group_offsets
from jetserver.cli.main import main
from jetserver.observe.bench_check import check_held
from jetserver.observe.bench_report import PlotUnavailable, summary_table, to_json, write_plot
from jetserver.observe.bench_run import BenchConfig, BenchResult, SideStats
from support.jet_cli import jet, ok
from support.jet_dev import JetDev

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


async def _hws(servers: list[str], stream: str) -> list[int]:
    async with Client(servers) as client:
        info = await client.stream_info(stream, refresh=True)
        return [
            (await client.list_offsets(stream, p, "latest")).hw for p in range(info.partition_count)
        ]


def hws(dev: JetDev, stream: str) -> list[int]:
    return anyio.run(_hws, dev.servers, stream)


def bench_json(dev: JetDev, *args: str) -> dict[str, Any]:
    report: dict[str, Any] = orjson.loads(ok(jet(dev, "bench", *args, "--json")))
    return report


def test_fan_out_counts_match_what_was_sent(dev3: JetDev, tmp_path: Path) -> None:
    plot = tmp_path / "bench.png"
    report = bench_json(
        dev3,
        "benchfan",
        "--pub", "2", "--sub", "2", "--msgs", "1000", "--size", "64",
        "--partitions", "2", "--replicas", "3", "--ack", "all", "--plot", str(plot),
    )  # fmt: skip
    assert report["complete"] is True
    assert report["config"]["partitions"] == 2
    assert report["pub"]["msgs"] == 1000
    assert report["pub"]["bytes"] == 1000 * 64
    assert report["pub"]["errors"] == 0
    assert [p["msgs"] for p in report["publishers"]] == [500, 500]
    # Fan-out: every subscriber read every message.
    assert report["sub"]["msgs"] == 2000
    assert [s["msgs"] for s in report["subscribers"]] == [1000, 1000]
    assert report["sub"]["latency_samples"] == 2000
    lat = report["pub"]["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"]
    assert report["pub"]["msg_per_s"] > 0
    assert report["pub"]["mb_per_s"] > 0
    # The servers stored exactly what was acknowledged.
    assert sum(hws(dev3, "benchfan")) == 1000
    assert plot.read_bytes()[:8] == PNG_MAGIC
    assert plot.stat().st_size > 10_000

    # A second run on the existing stream reads only its own messages.
    again = bench_json(dev3, "benchfan", "--pub", "1", "--sub", "1", "--msgs", "500")
    assert again["sub"]["msgs"] == 500
    assert again["complete"]
    assert sum(hws(dev3, "benchfan")) == 1500


def test_group_mode_shares_partitions_and_commits(dev3: JetDev) -> None:
    report = bench_json(
        dev3,
        "benchgroup",
        "--pub", "1", "--sub", "2", "--msgs", "2000", "--partitions", "3",
        "--group", "bench-g1",
    )  # fmt: skip
    assert report["complete"] is True
    assert report["config"]["group"] == "bench-g1"
    assert report["unique_received"] == 2000
    assert report["sub"]["msgs"] == 2000  # counted once per (partition, offset)
    ends = hws(dev3, "benchgroup")
    assert sum(ends) == 2000

    async def committed() -> dict[StreamPartition, int]:
        async with Client(dev3.servers) as client:
            return {k: v.offset for k, v in (await group_offsets(client, "bench-g1")).items()}

    # The members committed what they read when they left.
    assert anyio.run(committed) == {StreamPartition("benchgroup", p): ends[p] for p in range(3)}


def test_latency_mode_and_table(dev3: JetDev) -> None:
    proc = jet(
        dev3, "bench", "benchlat", "--latency", "--msgs", "400", "--rate", "400", "--size", "32"
    )
    out = ok(proc)
    lines = out.splitlines()
    assert lines[0].startswith("jet bench benchlat: 400 msgs of 32 B, 1 pub, 1 sub")
    assert "latency" in lines[0]
    header = ["MSGS", "MSG/S", "MB/S", "P50", "ms", "P90", "ms", "P99", "ms", "P999", "ms"]
    assert lines[1].split() == header
    pub = lines[2].split()
    sub = lines[3].split()
    assert pub[:3] == ["Pub", "(send->ack)", "400"]
    assert sub[:3] == ["Sub", "(send->recv)", "400"]
    # Paced at 400/s: the run takes about a second, so no more than ~400 msg/s measured.
    assert float(pub[3].replace(",", "")) < 600


def test_usage_errors() -> None:
    # Refused before connecting to anything (in process: no server needed).
    assert main(["bench", "x", "--pub", "0"]) == 2
    assert main(["bench", "x", "--group", "g"]) == 2  # no subscriber


def test_plot_without_matplotlib_is_explained(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = BenchResult(
        config=BenchConfig(stream="s", msgs=1),
        start_ns=0,
        end_ns=10**9,
        publishers=[SideStats("pub #1")],
        subscribers=[],
        group=None,
        expected_per_subscriber=0,
        unique_received=0,
        complete=False,
    )
    result.publishers[0].add(5 * 10**8, 0, 10, 1000)
    assert "INCOMPLETE" not in summary_table(to_json(result) | {"complete": True})
    assert "INCOMPLETE" in summary_table(to_json(result))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotUnavailable, match=r"jetserver\[plot\]"):
        write_plot(result, tmp_path / "x.png")


def test_a_message_over_the_limit_is_a_clear_error(dev3: JetDev) -> None:
    proc = jet(dev3, "bench", "benchbig", "--size", "2000000", "--msgs", "2")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "ExceptionGroup" not in proc.stderr
    assert "--size 2000000" in proc.stderr
    assert "1048576" in proc.stderr  # the server's max_message_bytes


@pytest.mark.parametrize("size", [0, 4])
def test_latency_for_any_size(dev3: JetDev, size: int) -> None:
    report = bench_json(
        dev3, f"benchtiny{size}", "--sub", "1", "--msgs", "300", "--size", str(size)
    )
    assert report["complete"] is True
    assert report["sub"]["msgs"] == 300
    assert report["sub"]["latency_samples"] == 300
    assert report["pub"]["bytes"] == 300 * size


def test_idempotent_by_default_and_the_servers_hold_what_was_sent(dev3: JetDev) -> None:
    report = bench_json(
        dev3, "benchcheck", "--pub", "2", "--msgs", "800", "--partitions", "3", "--ack", "all"
    )
    assert report["config"]["idempotent"] is True
    check = report["check"]
    assert check == {
        "held": 800,
        "distinct": 800,
        "duplicates": 0,
        "missing_acked": 0,
        "missing_unacked": 0,
        "foreign": 0,
    }
    assert sum(hws(dev3, "benchcheck")) == 800
    off = bench_json(dev3, "benchcheck", "--msgs", "100", "--no-idempotent")
    assert off["config"]["idempotent"] is False
    assert off["check"]["distinct"] == 100  # only this run's messages are counted
    table = ok(jet(dev3, "bench", "benchcheck", "--msgs", "50"))
    assert "check: the servers hold 50 of this run's messages" in table
    assert "0 duplicates, 0 missing" in table


def test_the_check_counts_duplicates_and_losses() -> None:
    held = [(0, 0), (0, 1), (0, 1), (1, 0), (9, 9)]  # (publisher, sequence); (9, 9) unsent
    check = check_held(held, sent={0: 3, 1: 2}, acked={(0, 0), (0, 1), (0, 2), (1, 0)})
    assert check.as_json() == {
        "held": 5,
        "distinct": 3,
        "duplicates": 1,
        "missing_acked": 1,  # (0, 2): acknowledged, not held: a loss
        "missing_unacked": 1,  # (1, 1): never acknowledged, not held
        "foreign": 1,
    }
    assert check.lost
