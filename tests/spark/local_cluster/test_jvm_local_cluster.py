"""The JVM reader (format ``jetstream-jvm``, :mod:`jetspark.jvm`) on a multi-process Spark
(``local-cluster[2,1,1024]``): its tasks run in the executor JVMs, which load the jar from
``spark.jars`` (the driver is driver.py, shared with this package's other tests). A batch
read and an AvailableNow stream of several micro-batches give every record exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.jet_dev import JetDev

from ..helpers import create, produce, read_partitions, unique
from .driver import RUN_RECORDS_PER_TRIGGER
from .processes import SharedDriver

pytestmark = pytest.mark.spark


@pytest.mark.timeout(600)
def test_jvm_reader_on_local_cluster(
    local_cluster: SharedDriver, jet_dev: JetDev, tmp_path: Path
) -> None:
    servers = list(jet_dev.servers)
    src = unique("lc-jvm")
    create(servers, src, partitions=3)
    produce(
        servers,
        src,
        [(b"k%d" % (i % 7), b"v%d" % i) for i in range(2 * RUN_RECORDS_PER_TRIGGER + 100)],
    )
    parts = read_partitions(servers, src)
    expected = sorted([p, r.offset, r.value.decode()] for p, rs in parts.items() for r in rs)

    driver = local_cluster.get()
    driver.send("jvm", servers=",".join(servers), src=src, checkpoint=str(tmp_path / "cp"))
    events = driver.until("end")
    batch = next(e for e in events if e["event"] == "jvm-batch")
    assert batch["rows"] == expected
    streamed = [e for e in events if e["event"] == "jvm-stream"]
    assert [e["batch"] for e in streamed] == [0, 1, 2]
    assert [len(e["rows"]) for e in streamed] == [RUN_RECORDS_PER_TRIGGER] * 2 + [100]
    assert sorted(row for e in streamed for row in e["rows"]) == expected
