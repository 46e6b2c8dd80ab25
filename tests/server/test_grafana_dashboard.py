"""deploy/grafana/jet-dashboard.json names only metrics a real server exports (scraped from
its metrics endpoint after traffic), and is a well-formed dashboard."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient

from .test_metrics import scrape

pytestmark = pytest.mark.anyio

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "jet-dashboard.json"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def dashboard_exprs() -> list[str]:
    dash = orjson.loads(DASHBOARD.read_bytes())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["definition"])
    return exprs


def exported_names(exposition: str) -> set[str]:
    """Every sample name the exposition can hold (histograms: their three series)."""
    names = set()
    for m in re.finditer(r"^# TYPE (\S+) (\S+)$", exposition, re.MULTILINE):
        name, kind = m.groups()
        names.add(name)
        if kind == "histogram":
            names.update(name + s for s in HISTOGRAM_SUFFIXES)
    return names


def test_dashboard_is_well_formed() -> None:
    dash = orjson.loads(DASHBOARD.read_bytes())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 10
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        grid = panel["gridPos"]
        assert grid["x"] >= 0
        assert grid["x"] + grid["w"] <= 24
        for target in panel["targets"]:
            # Balanced brackets: a typo here is a query Grafana cannot parse.
            expr = target["expr"]
            for open_, close in ("()", "{}", "[]"):
                assert expr.count(open_) == expr.count(close), expr


async def test_every_metric_named_is_exported(nats_server: NatsServer, tmp_path: Path) -> None:
    named = {n for e in dashboard_exprs() for n in re.findall(r"\bjet_[a-z0-9_]+", e)}
    assert "jet_partition_replica_lag_records" in named
    async with running_server(nats_server.url, tmp_path / "data", metrics__port=0) as server:
        assert server.metrics_address is not None
        async with await RawClient.connect(server.address) as c:
            await c.create_stream(name="dash", subject="dash", partitions=1)
            await c.produce("dash", 0, [ProduceMessage(b"x")], ack_policy=AckPolicy.ALL)
            status, text = await scrape(server.metrics_address)
    assert status == 200
    exported = exported_names(text)
    assert "jet_partition_high_watermark" in exported
    missing = sorted(named - exported)
    assert not missing, f"the dashboard names metrics no server exports: {missing}"
