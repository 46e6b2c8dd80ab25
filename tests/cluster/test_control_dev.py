"""`jet dev --servers 3`: a 3-server cluster on loopback, printing the usual address lines."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from support.jet_dev import JetDev

from .control_kit import call, metadata


@pytest.mark.anyio
async def test_jet_dev_runs_a_three_server_cluster(tmp_path: Path) -> None:
    with JetDev.start(tmp_path / "data", servers=3) as dev:
        assert dev.nats_url.startswith("nats://127.0.0.1:")
        assert len(dev.servers) == 3
        answer = await metadata(dev.servers[2])
        assert [s["address"] for s in answer["servers"]] == dev.servers
        assert answer["metadata_leader"] in ("s1", "s2", "s3")
        spec = {"name": "dev", "subject": "dev", "partitions": 3, "replication_factor": 3}
        created = await call(dev.servers[1], lambda c: c.create_stream(**spec))
        assert sorted(p["leader"] for p in created["stream"]["partitions"]) == ["s1", "s2", "s3"]
        layout = orjson.loads((tmp_path / "data" / "devcluster.json").read_bytes())
        assert len(layout["password"]) >= 16
        assert (tmp_path / "data" / "devcluster.json").stat().st_mode & 0o077 == 0
        assert dev.stop() == 0
