"""jetspark on a multi-process Spark: ``local-cluster[2,1,1024]`` runs two executor JVMs,
each with its own Python workers, under a driver that is its own process here (driver.py,
shared with this package's other tests: this test runs last, as it kills it). One executor
JVM is killed (SIGKILL) while a micro-batch runs; later the driver is killed (SIGKILL, the
whole process group this package started for it) after writing part of a batch, and a new
driver resumes from the checkpoint (on ``local[2]``, no executor JVM: what it checks is the
driver's resumption, and an executor JVM's start costs about as much CPU as the rest of its
work; the sink still writes from Python workers apart from the driver). The target stream
ends with every source record exactly once.

Only processes this test started are killed: the executor JVMs are found as children of
the driver JVM (whose PID the driver prints), and the drivers' process groups are the ones
``start_new_session`` made for them.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from support.jet_dev import JetDev

from ..helpers import create, produce, read_all, unique
from .driver import RUN_RECORDS_PER_TRIGGER
from .processes import DriverProcess, SharedDriver

pytestmark = pytest.mark.spark

ENDS_THE_DRIVER = True
"""This module's test kills the shared driver: it runs after the package's others."""
BATCHES = 5
ROWS = BATCHES * RUN_RECORDS_PER_TRIGGER
HANG = 3
"""The batch the first driver writes half of and is killed in."""


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


def _executors(jvm: int) -> list[int]:
    return [pid for pid, cmd in _children(jvm) if "CoarseGrainedExecutorBackend" in cmd]


@pytest.mark.timeout(600)
def test_executor_kill_and_driver_restart_are_exactly_once(
    local_cluster: SharedDriver, jet_dev: JetDev, tmp_path: Path
) -> None:
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the executor JVMs through /proc")
    servers = jet_dev.servers
    src, out = unique("lc-src"), unique("lc-out")
    create(servers, src, partitions=2)
    create(servers, out, partitions=2)
    sent = [(f"k{i % 40}".encode(), f"m{i}".encode()) for i in range(ROWS)]
    produce(servers, src, sent)
    query = {"servers": ",".join(servers), "src": src, "out": out}
    checkpoint = str(tmp_path / "checkpoint")

    first = local_cluster.hand_over()
    try:
        first.send("run", **query, checkpoint=checkpoint, hang=HANG)
        jvm = first.expect("jvm")["pid"]
        executors = _executors(jvm)
        assert len(executors) == 2, _children(jvm)
        first.expect("done", batch=0)
        first.expect("start", batch=1)
        os.kill(executors[0], signal.SIGKILL)  # while batch 1 runs
        done = [first.expect("done", batch=1), first.expect("done", batch=2)]
        assert [d["written"] + d["duplicates"] for d in done] == [RUN_RECORDS_PER_TRIGGER] * 2
        hang = first.expect("hang", batch=HANG)
        assert 0 < hang["written"] < RUN_RECORDS_PER_TRIGGER  # one of its two tasks wrote
        # Spark replaced the dead executor (the query went on with two).
        assert executors[0] not in _executors(jvm)
    finally:
        first.kill()  # the driver dies with batch 3 half-written and not committed
    stored = len(read_all(servers, out))
    assert stored == HANG * RUN_RECORDS_PER_TRIGGER + hang["written"]  # batches 0-2, part of 3

    resume = [query["servers"], src, out, checkpoint]
    second = DriverProcess(["available-now", *resume], tmp_path / "resumed.log")
    try:
        replay = second.expect("done")
        assert replay["batch"] == HANG
        assert replay["duplicates"] == hang["written"]  # the part stored before the kill
        assert replay["written"] == RUN_RECORDS_PER_TRIGGER - hang["written"]
        second.expect("done", batch=BATCHES - 1)
        second.expect("end")
        assert second.proc.wait(timeout=60) == 0
    finally:
        second.kill()
    got = read_all(servers, out)
    assert Counter((r.key, r.value) for r in got) == Counter((k, v + b"!") for k, v in sent)
