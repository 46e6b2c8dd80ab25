"""``jet bench`` through a kill -9 of a partition leader (issue 35: it reported success while
the stream held duplicates): idempotent producers store nothing twice, and the final check
reads back what the servers hold and finds every acknowledged message once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import orjson

from jetsdk import Client
from jetserver.testing import Cluster
from support.jet_cli import jet_env

RUN_BOUND_S = 180.0


async def _leader_of(servers: list[str], stream: str) -> str | None:
    async with Client(servers) as client:
        try:
            info = await client.stream_info(stream, refresh=True)
        except Exception:
            return None
        return info.partitions[0].leader


def test_a_leader_killed_mid_run_leaves_no_duplicate_and_no_loss(tmp_path: Path) -> None:
    with Cluster(size=3, root=tmp_path / "c") as cluster:
        env = jet_env(None) | {"JET_SERVERS": ",".join(cluster.addresses)}
        args = [
            sys.executable, "-m", "jetserver.cli.main", "bench", "faulty",
            "--pub", "2", "--msgs", "10000", "--size", "64", "--rate", "2500",
            "--partitions", "3", "--replicas", "3", "--ack", "all", "--json",
        ]  # fmt: skip
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            leader = None
            deadline = time.monotonic() + 30
            while leader is None and time.monotonic() < deadline:
                leader = anyio.run(_leader_of, cluster.addresses, "faulty")
                time.sleep(0.2)
            assert leader is not None, "the bench did not create its stream"
            time.sleep(2.0)  # mid-run: about 5,000 of 10,000 sent (4 s at 2,500/s)
            cluster.kill(leader, signal.SIGKILL)
            out, err = proc.communicate(timeout=RUN_BOUND_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        report = orjson.loads(out)
        check = report["check"]
        print("bench through a kill:", report["pub"]["msgs"], "acked;", check, err.decode()[-500:])
        assert report["config"]["idempotent"] is True
        assert check["duplicates"] == 0
        assert check["missing_acked"] == 0
        assert check["distinct"] >= report["pub"]["msgs"]
        # Exit 0 when everything was acknowledged; 1 only for sends that failed (none lost).
        assert proc.returncode == (0 if report["complete"] else 1)
