"""The README demo (``nox -s demo``) without Spark, on its default 3-server cluster and on
one server: it runs to the end, its checks pass (every key on one partition, the group
processes every message, nothing acked is lost across the kill -9 of a partition leader) and
it stops what it started.

The 3-server run takes ~20-30 s on a loaded 2-core machine (cluster start, a leader
election, a restart and catch-up, clean stops): it is the README's promise, so it runs in CI.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cluster.harness import needs_cluster
from jetserver.cli import demo


@pytest.mark.fault
@needs_cluster
def test_demo_on_three_servers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo.run(300, tmp_path, servers=3, spark=False)
    out = capsys.readouterr().out
    pids = [int(p) for p in re.findall(r"PID (\d+)", out)]
    assert len(pids) >= 5  # nats-server, 3 servers, the restarted one
    assert "replication factor 3" in out
    assert "key -> partition (murmur2, stable)" in out
    assert f"with {demo.MEMBERS} members processed 304 messages (304 expected)" in out
    members = re.findall(r"member \d \(\S+\): partitions \[([\d, ]*)\]", out)
    assert len(members) == demo.MEMBERS
    owned = sorted(int(p) for parts in members for p in parts.split(",") if p.strip())
    assert owned == list(range(demo.PARTITIONS))  # shared out, none twice
    acked = f"{demo.FAILOVER_ORDERS} of {demo.FAILOVER_ORDERS} orders acked, 0 failed"
    assert acked in out
    read = f"acked orders read back: {demo.FAILOVER_ORDERS}/{demo.FAILOVER_ORDERS}"
    assert read in out
    assert "jet cluster status" in out
    assert "metadata leader:" in out
    assert "stopped nats-server and the jet servers." in out
    for pid in pids:  # every process the demo started is gone
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"PID {pid} still runs"


def test_demo_on_one_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo.run(100, tmp_path, servers=1, spark=False)
    out = capsys.readouterr().out
    assert "processed 104 messages (104 expected)" in out
    assert "skipped: needs 3 or more servers" in out
    assert "stopped nats-server and the jet servers." in out


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"
