"""jetspark on a multi-process Spark: ``local-cluster[2,1,1024]`` runs two executor JVMs,
each with its own Python workers, under a driver that is its own process here
(tests/spark/cluster_driver.py). One executor JVM is killed (SIGKILL) while a micro-batch
runs; later the driver is killed (SIGKILL, the whole process group this test started)
after writing part of a batch, and a new driver resumes from the checkpoint (on
``local[2]``, no executor JVM: what it checks is the driver's resumption, and an executor
JVM's start costs about as much CPU as the rest of its work; the sink still writes from
Python workers apart from the driver). The target stream ends with every source record
exactly once.

The worker's `jet dev` (``jet_dev``, not the Spark tests' ``spark_jet``): it needs no shared
SparkSession, so it runs on its own xdist worker beside them instead of after them.

Only processes this test started are killed: the executor JVMs are found as children of
the driver JVM (whose PID the driver prints), and the driver's process group is the one
``start_new_session`` made for it.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

import orjson
import pytest

from support.jet_dev import JetDev

from .helpers import create, produce, read_all, unique

pytestmark = pytest.mark.spark

DRIVER = Path(__file__).with_name("cluster_driver.py")
EVENT_TIMEOUT_S = 240.0
"""Bound on waiting for one driver event (a cold local-cluster start on a loaded 2-core
machine took up to a minute)."""
ROWS = 7500  # five micro-batches of 1500 (cluster_driver.MAX_RECORDS_PER_TRIGGER)


class _Driver:
    """A cluster_driver.py process and its JSON events."""

    def __init__(self, args: list[str], log: TextIO) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,  # its own process group: the driver and its JVMs
        )
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.log.write(line)  # with the driver's log lines, for a failure's report
                self.log.flush()
                self.events.put(orjson.loads(line))
        self.events.put(None)

    def expect(self, event: str, **fields: Any) -> dict[str, Any]:
        """The next event named ``event`` with ``fields`` (others before it are skipped)."""
        while True:
            got = self.events.get(timeout=EVENT_TIMEOUT_S)
            if got is None:
                raise AssertionError(f"driver exited ({self.proc.wait()}) before {event}")
            if got["event"] == event and all(got.get(k) == v for k, v in fields.items()):
                return got

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append((int(entry.name), cmdline))
    return out


@pytest.mark.timeout(600)
def test_executor_kill_and_driver_restart_are_exactly_once(jet_dev: JetDev, tmp_path: Path) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java for Spark")
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the executor JVMs through /proc")
    servers = jet_dev.servers
    src, out = unique("lc-src"), unique("lc-out")
    create(servers, src, partitions=2)
    create(servers, out, partitions=2)
    sent = [(f"k{i % 40}".encode(), f"m{i}".encode()) for i in range(ROWS)]
    produce(servers, src, sent)
    args = [",".join(servers), src, out, str(tmp_path / "checkpoint")]
    log = (tmp_path / "drivers.log").open("w")

    first = _Driver([*args, "run", "3"], log)
    try:
        jvm = first.expect("jvm")["pid"]
        executors = [pid for pid, cmd in _children(jvm) if "CoarseGrainedExecutorBackend" in cmd]
        assert len(executors) == 2, _children(jvm)
        first.expect("done", batch=0)
        first.expect("start", batch=1)
        os.kill(executors[0], signal.SIGKILL)  # while batch 1 runs
        done = [first.expect("done", batch=1), first.expect("done", batch=2)]
        assert [d["written"] + d["duplicates"] for d in done] == [1500, 1500]
        hang = first.expect("hang", batch=3)
        assert 0 < hang["written"] < 1500  # one of batch 3's two tasks wrote its rows
        # Spark replaced the dead executor (the query went on with two).
        alive = [pid for pid, cmd in _children(jvm) if "CoarseGrainedExecutorBackend" in cmd]
        assert executors[0] not in alive
    finally:
        first.kill()  # the driver dies with batch 3 half-written and not committed
    assert len(read_all(servers, out)) == 3 * 1500 + hang["written"]  # batches 0-2, part of 3

    second = _Driver([*args, "available-now"], log)
    try:
        replay = second.expect("done")
        assert replay["batch"] == 3
        assert replay["duplicates"] == hang["written"]  # the part stored before the kill
        assert replay["written"] == 1500 - hang["written"]
        second.expect("done", batch=4)
        second.expect("end")
        assert second.proc.wait(timeout=60) == 0
    finally:
        second.kill()
    got = read_all(servers, out)
    assert Counter((r.key, r.value) for r in got) == Counter((k, v + b"!") for k, v in sent)
