"""Tables in Spark on a multi-process Spark (``local-cluster[2,1,1024]``, executor JVMs
apart from the driver's: the table's reads and writes run in other processes than the
driver's; the driver is driver.py in its own process, shared with this package's other
tests):

- ``spark.read.format("jetstream").option("table", ...)`` gives exactly what a
  :class:`jetsdk.Table` holds (latest value per key; deletes and expired keys absent);
- a stream-static join of a stream with that table, written into another table by
  ``foreach_batch_sink(table=...)``, has exactly-once effect when Spark replays a batch that
  failed after part of it was stored: nothing is stored twice and the table ends with each
  key's last order.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jetsdk import Client, Table
from support.jet_dev import JetDev

from ..helpers import create, produce, read_all, unique, until_expired
from .processes import SharedDriver

pytestmark = pytest.mark.spark

ORDERS = 200


async def _prices(servers: list[str], name: str) -> dict[str, tuple[str, int, int]]:
    """Fill table ``name``; key -> (value, partition, revision) as a jetsdk Table holds it."""
    async with Client(servers) as client, Table(client, name) as table:
        revisions = [await table.put(b"k%d" % i, b"%d.00" % i) for i in range(20)]
        await table.update(b"k4", b"4.50", revisions[4])
        await table.delete(b"k7")
        await table.put(b"k8", b"8.00", ttl=0.001)  # expired before Spark reads it
        await table.sync()
        await until_expired(table, b"k8")
        return {
            e.key.decode(): (e.value.decode(), e.partition, e.revision) for e in table._opened()
        }


async def _table(servers: list[str], name: str) -> dict[bytes, bytes]:
    async with Client(servers) as client, Table(client, name) as table:
        return dict(table.items())


@pytest.mark.timeout(600)
def test_table_read_and_table_sink_on_local_cluster(
    local_cluster: SharedDriver, jet_dev: JetDev, tmp_path: Path
) -> None:
    servers = list(jet_dev.servers)
    prices, orders, totals = unique("lc-prices"), unique("lc-orders"), unique("lc-totals")
    create(servers, prices, partitions=2, compact=True)
    create(servers, orders, partitions=2)
    create(servers, totals, partitions=2, compact=True)
    expected_prices = anyio.run(_prices, servers, prices)
    sent = [(b"k%d" % (i % 25), b"order-%d" % i) for i in range(ORDERS)]
    produce(servers, orders, sent)

    driver = local_cluster.get()
    driver.send(
        "table",
        servers=",".join(servers),
        prices=prices,
        orders=orders,
        totals=totals,
        checkpoint=str(tmp_path / "checkpoint"),
    )
    events = driver.until("end")
    by_name = {e["event"]: e for e in events}

    # The table read is the SDK table's view.
    got = {k: (v, p, o) for k, v, p, o in by_name["table"]["rows"]}
    assert got == expected_prices
    assert "k7" not in got
    assert "k8" not in got
    assert got["k4"][0] == "4.50"

    # Batch 0 failed after part of it was stored; its replay stored only the rest.
    partial = by_name["partial"]
    assert partial["batch"] == 0
    assert by_name["failed"]
    done = [e for e in events if e["event"] == "done"]
    assert [d["batch"] for d in done] == [0, 1]
    assert 0 < partial["written"] == done[0]["duplicates"]
    assert done[0]["written"] > 0
    priced = [(k, v) for k, v in sent if k.decode() in expected_prices]
    assert partial["written"] + sum(d["written"] for d in done) == len(priced)
    assert sum(d["written"] + d["duplicates"] for d in done) == len(priced)
    assert len(read_all(servers, totals)) == len(priced)  # every joined order once
    last: dict[bytes, bytes] = {}
    for key, value in priced:  # each key's orders are in one partition, in this order
        last[key] = value + b"@" + expected_prices[key.decode()][0].encode()
    assert anyio.run(_table, servers, totals) == last
