"""The Prometheus metrics endpoint: scrape after real traffic and check the values."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import orjson
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import ProduceMessage
from jetserver.metrics.exposition import Histogram
from support.jet_dev import JetDev
from support.jet_server import running_server, start_server_process
from support.nats_server import NatsServer
from support.raw_client import RawClient, ServerError, split_address

pytestmark = pytest.mark.anyio

SCRAPE_TIMEOUT_S = 10.0
OUTAGE_BOUND_S = 30.0


async def scrape(address: str, path: str = "/metrics") -> tuple[int, str]:
    """GET ``path``; (status, body)."""
    host, port = split_address(address)
    with anyio.fail_after(SCRAPE_TIMEOUT_S):
        async with await anyio.connect_tcp(host, port) as s:
            await s.send(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            data = b""
            while True:
                try:
                    data += await s.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    return status, body.decode()


def value(text: str, name: str, **labels: str) -> float:
    """The sample ``name{labels}`` (labels must match exactly, in any order)."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-z_]+)(?:\{(.*)\})? (\S+)", line)
        assert m, line
        if m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if got == labels:
            return float(m.group(3))
    raise AssertionError(f"no sample {name}{labels} in:\n{text}")


async def test_metrics_after_traffic(nats_server: NatsServer, tmp_path: Path) -> None:
    async with running_server(nats_server.url, tmp_path / "data", metrics__port=0) as server:
        assert server.metrics_address is not None
        async with await RawClient.connect(server.address) as c:
            await c.create_stream(name="orders", subject="orders", partitions=2)
            for i in range(5):
                results = await c.produce(
                    "orders", 0, [ProduceMessage(b"m%d" % i)] * 3, ack_policy=AckPolicy.ALL
                )
                assert all(r.error_code == 0 for r in results)
            await c.produce("orders", 1, [ProduceMessage(b"x")], ack_policy=AckPolicy.ALL)
            _header, records = await c.fetch("orders", 0, offset=4)
            assert len(records) == 11
            with pytest.raises(ServerError):
                await c.describe("missing")
            status, text = await scrape(server.metrics_address)
        assert status == 200
        assert value(text, "jet_partition_high_watermark", stream="orders", partition="0") == 15
        assert value(text, "jet_partition_log_end_offset", stream="orders", partition="0") == 15
        assert value(text, "jet_partition_high_watermark", stream="orders", partition="1") == 1
        assert value(text, "jet_partition_isr_size", stream="orders", partition="0") == 1
        assert value(text, "jet_partition_leader", stream="orders", partition="0") == 1
        assert (
            value(text, "jet_partition_consumer_lag_records", stream="orders", partition="0") == 11
        )
        assert value(text, "jet_requests_total", api="produce", code="NONE") == 6
        assert value(text, "jet_requests_total", api="fetch", code="NONE") == 1
        assert (
            value(text, "jet_requests_total", api="describe_stream", code="STREAM_NOT_FOUND") == 1
        )
        assert value(text, "jet_request_duration_seconds_count", api="produce") == 6
        assert value(text, "jet_request_duration_seconds_bucket", api="produce", le="+Inf") == 6
        assert value(text, "jet_nats_connected") == 1
        assert value(text, "jet_nats_disconnects_total") == 0
        assert value(text, "jet_connections") == 1
        assert value(text, "jet_connections_accepted_total") >= 1
        assert value(text, "jet_connections_refused_total") == 0
        assert "# TYPE jet_request_duration_seconds histogram" in text
        # Other paths and methods are refused; the endpoint keeps serving.
        assert (await scrape(server.metrics_address, "/"))[0] == 404
        assert (await scrape(server.metrics_address))[0] == 200


async def test_active_segment_files_open_and_parked(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """New partitions open idle, their active segment file parked at once; an append
    opens its partition's file again (issue 34: files of idle partitions)."""
    async with running_server(nats_server.url, tmp_path / "data", metrics__port=0) as server:
        assert server.metrics_address is not None
        names = (
            "jet_open_active_files",
            "jet_parked_active_files",
            "jet_active_files_parked_total",
        )
        async with await RawClient.connect(server.address) as c:
            _status, text = await scrape(server.metrics_address)
            before = [value(text, name) for name in names]
            await c.create_stream(name="files", subject="files", partitions=3)
            _status, text = await scrape(server.metrics_address)
            opened, parked, parks = (value(text, n) - b for n, b in zip(names, before, strict=True))
            assert (opened, parked, parks) == (0, 3, 3)
            results = await c.produce("files", 0, [ProduceMessage(b"x")], ack_policy=AckPolicy.ALL)
            assert results[0].error_code == 0
            _status, text = await scrape(server.metrics_address)
        opened, parked = (value(text, n) - b for n, b in zip(names[:2], before, strict=False))
        # The idle-files sweep may have parked it again since (two sweeps of no appends).
        assert (opened, parked) in ((1, 2), (0, 3))
        assert "# TYPE jet_active_files_parked_total counter" in text


@pytest.mark.parametrize("on_loop", [True, False])
async def test_fsyncs_counted_where_they_ran(
    nats_server: NatsServer, tmp_path: Path, on_loop: bool
) -> None:
    """Acked sends one at a time: fsyncs on the event loop by default (while fast and
    few), every one in a worker thread with ``[storage] fsync_on_loop = false``."""
    async with running_server(
        nats_server.url, tmp_path / "data", metrics__port=0, storage__fsync_on_loop=on_loop
    ) as server:
        assert server.metrics_address is not None
        async with await RawClient.connect(server.address) as c:
            await c.create_stream(name="sync", subject="sync")
            for i in range(10):
                results = await c.produce(
                    "sync", 0, [ProduceMessage(b"m%d" % i)], ack_policy=AckPolicy.ALL
                )
                assert results[0].error_code == 0
            _status, text = await scrape(server.metrics_address)
    on, off = (
        value(text, "jet_fsyncs_total", place="loop"),
        value(text, "jet_fsyncs_total", place="thread"),
    )
    assert on + off >= 10  # each ALL-acked send, one at a time, waits for an fsync
    if on_loop:
        assert on >= 1  # on a loaded disk some may go to threads (slow or too many)
    else:
        assert on == 0


async def test_no_endpoint_by_default(nats_server: NatsServer, tmp_path: Path) -> None:
    async with running_server(nats_server.url, tmp_path / "data") as server:
        assert server.metrics_address is None
        async with await RawClient.connect(server.address or "") as c:
            await c.call_json(Api.HELLO, {"protocol": 1})
        assert server.metrics.requests.counts[("hello", "NONE")] == 1


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram(bounds=(0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 2.0):
        h.observe(v)
    lines = list(h.lines("x", 'api="a"'))
    assert lines == [
        'x_bucket{api="a",le="0.1"} 2',
        'x_bucket{api="a",le="1.0"} 3',
        'x_bucket{api="a",le="+Inf"} 4',
        'x_sum{api="a"} 2.65',
        'x_count{api="a"} 4',
    ]


async def test_cli_json_logs_and_metrics_port(nats_server: NatsServer, tmp_path: Path) -> None:
    """`jet server --log-format json --metrics-port 0`: every log line is a JSON object with
    ts, level, logger, msg and the record's fields; the ready file names the metrics
    address, which serves the exposition."""
    data_dir = tmp_path / "data"
    proc = start_server_process(
        nats_server.url, data_dir, "--log-format", "json", "--metrics-port", "0"
    )
    try:
        ready = orjson.loads(proc.ready_file.read_bytes())
        status, text = await scrape(ready["metrics_address"])
        assert status == 200
        assert value(text, "jet_nats_connected") == 1
    finally:
        assert proc.stop() == 0
    lines = [ln for ln in proc.incarnation_log().splitlines()[1:] if ln.strip()]
    records = [orjson.loads(ln) for ln in lines]
    assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    (ready_line,) = [r for r in records if r["msg"] == "server ready"]
    assert ready_line["server_id"] == "s1"
    assert ready_line["event_loop"] == "uvloop"  # [server] event_loop = "auto", installed
    assert any(r["msg"] == "metrics endpoint listening" for r in records)


async def test_cli_event_loop_setting(nats_server: NatsServer, tmp_path: Path) -> None:
    """`[server] event_loop = "asyncio"` runs the server on asyncio's own loop; an unknown
    value is a configuration error (exit code 2)."""
    proc = start_server_process(
        nats_server.url,
        tmp_path / "data",
        "--log-format",
        "json",
        env={"JET_SERVER_EVENT_LOOP": "asyncio"},
    )
    assert proc.stop() == 0
    lines = [ln for ln in proc.incarnation_log().splitlines()[1:] if ln.strip()]
    (ready_line,) = [r for r in map(orjson.loads, lines) if r["msg"] == "server ready"]
    assert ready_line["event_loop"] == "asyncio"
    done = subprocess.run(  # noqa: ASYNC221 (a short, bounded CLI run)
        [sys.executable, "-m", "jetserver.cli.main", "server", "--print-config"],
        env={**os.environ, "JET_SERVER_EVENT_LOOP": "tokio"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "event_loop" in done.stderr


async def test_nats_link_state_follows_an_outage(nats_server: NatsServer, tmp_path: Path) -> None:
    """jet_nats_connected drops to 0 while NATS is down and returns to 1 (with the
    disconnect and reconnect counted) once it is back."""
    async with running_server(nats_server.url, tmp_path / "data", metrics__port=0) as server:
        address = server.metrics_address or ""

        async def until(**expected: float) -> None:
            """Scrape until every named sample is at least (``_total``) or exactly its value
            (the counters are bumped by link callbacks, maybe just after the state changed)."""
            with anyio.fail_after(OUTAGE_BOUND_S):
                while True:
                    _status, text = await scrape(address)
                    if all(
                        value(text, k) >= v if k.endswith("_total") else value(text, k) == v
                        for k, v in expected.items()
                    ):
                        return
                    await anyio.sleep(0.05)  # polling an HTTP endpoint: no event to wait on

        await until(jet_nats_connected=1)
        await anyio.to_thread.run_sync(nats_server.stop)
        await until(jet_nats_connected=0, jet_nats_disconnects_total=1)
        await anyio.to_thread.run_sync(nats_server.start)
        await until(jet_nats_connected=1, jet_nats_reconnects_total=1)


async def test_cluster_partition_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`jet dev --servers 3` with a metrics port each: for a partition replicated 3 times,
    exactly one server reports itself leader, every server reports the ISR size 3 and the
    same HW and LEO once replication caught up, and the leader reports its followers' lag.
    (About 10 s: a 3-server cluster start.)"""
    monkeypatch.setenv("JET_METRICS_PORT", "0")
    data_dir = tmp_path / "data"
    dev = await anyio.to_thread.run_sync(lambda: JetDev.start(data_dir, servers=3))
    try:
        metrics = [
            orjson.loads((data_dir / f"s{i}.run" / "ready.json").read_bytes())["metrics_address"]
            for i in (1, 2, 3)
        ]
        async with await RawClient.connect(dev.servers[0]) as c:
            await c.create_stream(name="m", subject="m", partitions=2, replication_factor=3)
            with anyio.fail_after(OUTAGE_BOUND_S):
                while True:  # the new partitions' leaders open asynchronously: retry
                    results = await c.produce(
                        "m", 0, [ProduceMessage(b"x")] * 5, ack_policy=AckPolicy.ALL
                    )
                    if all(r.error_code == ErrorCode.NONE for r in results):
                        break
                    await anyio.sleep(0.1)
        hw = results[-1].offset + 1
        labels = {"stream": "m", "partition": "0"}
        with anyio.fail_after(OUTAGE_BOUND_S):
            while True:
                texts = [(await scrape(a))[1] for a in metrics]
                hws = [value(t, "jet_partition_high_watermark", **labels) for t in texts]
                leos = [value(t, "jet_partition_log_end_offset", **labels) for t in texts]
                # (A retried batch may have been stored too: the HW is at least ``hw``.)
                if len(set(hws)) == 1 and hws[0] >= hw and leos == hws:
                    break
                await anyio.sleep(0.1)  # followers learn the HW with their next fetch
        assert [value(t, "jet_partition_isr_size", **labels) for t in texts] == [3] * 3
        assert [value(t, "jet_partition_replicas", **labels) for t in texts] == [3] * 3
        leaders = [t for t in texts if value(t, "jet_partition_leader", **labels) == 1]
        assert len(leaders) == 1
        lag_lines = [
            ln
            for ln in leaders[0].splitlines()
            if ln.startswith('jet_partition_replica_lag_records{stream="m",partition="0",')
        ]
        assert len(lag_lines) == 2  # one per follower
    finally:
        await anyio.to_thread.run_sync(dev.stop)
