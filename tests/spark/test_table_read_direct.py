"""Table reads (``option("table", ...)``) called directly against a real server, no JVM:
the rows equal what a :class:`jetsdk.Table` holds (tombstones, expired TTLs and keyless
records give none), whether the executor reduces the rows in one round or many.
The same read runs on Spark local-cluster in local_cluster/test_table_local_cluster.py."""

from __future__ import annotations

import anyio
import pytest

from jetsdk import Client, Table
from support.jet_dev import JetDev

from .helpers import create, produce, source_struct, unique, until_expired

pytestmark = pytest.mark.spark

Rows = dict[bytes, tuple[bytes, int, int]]
"""key -> (value, partition, revision)."""


def _read(dev: JetDev, table: str, **options: str) -> tuple[Rows, list[str]]:
    from jetspark.options import source_options
    from jetspark.table import JetTableReader

    raw = {"servers": ",".join(dev.servers), "table": table, **options}
    opts = source_options(raw, streaming=False)
    reader = JetTableReader(opts, source_struct(opts.include_headers))
    rows: Rows = {}
    names: list[str] = []
    for partition in reader.partitions():
        for batch in reader.read(partition):
            names = batch.schema.names
            got = batch.to_pydict()
            for key, value, part, offset in zip(
                got["key"], got["value"], got["partition"], got["offset"], strict=True
            ):
                assert key not in rows, key  # one row per key
                rows[key] = (value, part, offset)
    return rows, names


async def _fill(servers: list[str], name: str) -> Rows:
    """Puts, overwrites, compare-and-sets, deletes and TTLs; the table's state after."""
    async with Client(servers) as client, Table(client, name) as table:
        revisions = [await table.put(b"k%d" % i, b"first-%d" % i) for i in range(60)]
        for i in range(0, 60, 3):
            await table.update(b"k%d" % i, b"second-%d" % i, revisions[i])
        for i in range(1, 60, 10):
            await table.delete(b"k%d" % i)
        await table.put(b"gone-soon", b"x", ttl=0.001)  # expired before the read
        await table.put(b"lasting", b"y", ttl=3600.0)
        await table.delete(b"never-set")
        await table.sync()
        await until_expired(table, b"gone-soon")
        return {e.key: (e.value, e.partition, e.revision) for e in table._opened()}


def test_table_read_is_the_tables_latest_value_per_key(
    spark_jet: JetDev, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jetspark.table

    servers = list(spark_jet.servers)
    name = unique("tread")
    create(servers, name, partitions=2, compact=True)
    produce(servers, name, [(None, b"keyless")])
    expected = anyio.run(_fill, servers, name)
    assert b"gone-soon" not in expected
    assert b"k1" not in expected
    assert b"lasting" in expected
    assert len(expected) == 60 - 6 + 1

    rows, names = _read(spark_jet, name)
    assert rows == expected
    assert "headers" not in names
    # Reduced in many rounds (the executor's bounded buffer) gives the same rows.
    monkeypatch.setattr(jetspark.table, "COMPACT_EVERY_ROWS", 7)
    assert _read(spark_jet, name) == (rows, names)
    with_headers, names = _read(spark_jet, name, includeHeaders="true")
    assert with_headers == expected
    assert names[-1] == "headers"


def test_table_read_of_an_empty_table_has_no_partitions(spark_jet: JetDev) -> None:
    name = unique("tempty")
    create(spark_jet.servers, name, partitions=3, compact=True)
    assert _read(spark_jet, name) == ({}, [])


def test_table_read_refuses_a_plain_or_missing_stream(spark_jet: JetDev) -> None:
    from jetspark.errors import OptionError

    plain = unique("tplain")
    create(spark_jet.servers, plain, partitions=1)
    with pytest.raises(OptionError, match="not compacted") as info:
        _read(spark_jet, plain)
    assert info.value.option == "table"
    with pytest.raises(OptionError, match="does not exist") as info:
        _read(spark_jet, unique("tmissing"))
    assert info.value.option == "table"


def test_table_sink_checks_columns_keys_and_the_stream(spark_jet: JetDev) -> None:
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    from jetspark.errors import ColumnError, OptionError
    from jetspark.table_sink import check_table, check_table_columns, keyed_rows

    key, value = StructField("key", BinaryType()), StructField("value", BinaryType())
    check_table_columns(StructType([key, value]))
    with pytest.raises(ColumnError, match="required by a table sink") as info:
        check_table_columns(StructType([value]))
    assert info.value.column == "key"
    with pytest.raises(ColumnError, match="key's partition") as info:
        check_table_columns(StructType([key, value, StructField("partition", IntegerType())]))
    assert info.value.column == "partition"

    good = pa.record_batch({"value": [b"a", None], "Key": [b"k", b"j"]})
    assert list(keyed_rows([good])) == [good]
    bad = pa.record_batch({"value": [b"a", b"b"], "key": [b"k", None]})
    with pytest.raises(ColumnError, match="null key"):
        list(keyed_rows([good, bad]))

    plain = unique("tsinkplain")
    create(spark_jet.servers, plain, partitions=1)

    async def check(name: str) -> None:
        async with Client(list(spark_jet.servers)) as client:
            await check_table(client, name)

    with pytest.raises(OptionError, match="not compacted"):
        anyio.run(check, plain)
    with pytest.raises(OptionError, match="does not exist"):
        anyio.run(check, unique("tsinkmissing"))
    compacted = unique("tsink")
    create(spark_jet.servers, compacted, partitions=1, compact=True)
    anyio.run(check, compacted)
