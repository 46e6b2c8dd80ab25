"""The JVM reader (format ``jetstream-jvm``, :mod:`jetspark.jvm`) against the Python source
(format ``jetstream``) over the same streams of a real server: the same rows, the same
checkpointed offsets (byte for byte), a checkpoint carried from one reader to the other
and back, retention and compaction gaps, and the options it leaves to the Python reader.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest

from jetsdk.partitioner import partition_for_key
from jetspark.jvm import JVM_FORMAT, JavacNotFoundError, jar_path, source_format
from support.jet_dev import JetDev

from .helpers import create, produce, read_partitions, unique
from .test_sources import _settled, retained_stream

pytestmark = pytest.mark.spark

QUERY_TIMEOUT_S = 180


def _servers(dev: JetDev) -> str:
    return ",".join(dev.servers)


def _by_offset(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda r: (r["stream"], r["partition"], r["offset"]))


def _batch(spark: Any, fmt: str, dev: JetDev, streams: str, **options: str) -> list[Any]:
    reader = spark.read.format(fmt).option("servers", _servers(dev)).option("streams", streams)
    rows: list[Any] = reader.options(**options).load().collect()
    return _by_offset(rows)


def _run(spark: Any, fmt: str, dev: JetDev, streams: str, cp: Path, **options: str) -> list[Any]:
    """The rows of one Trigger.AvailableNow query of ``fmt`` from checkpoint ``cp``."""
    seen: list[Any] = []
    query = (
        spark.readStream.format(fmt)
        .option("servers", _servers(dev))
        .option("streams", streams)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
        .writeStream.foreachBatch(lambda df, _id: seen.extend(df.collect()))
        .option("checkpointLocation", str(cp))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    return seen


def _offset_log(cp: Path) -> list[bytes]:
    """The source offsets of every batch of checkpoint ``cp`` (the offset log's last line)."""
    files = sorted(
        (cp / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    )
    return [p.read_bytes().splitlines()[-1] for p in files if p.name.isdigit()]


def _stored(servers: list[str], stream: str) -> list[tuple[int, int]]:
    """(partition, offset) of every committed record of ``stream``, sorted."""
    parts = read_partitions(servers, stream)
    return sorted((p, r.offset) for p, records in parts.items() for r in records)


def _keys_for(partitions: int, wanted: set[int], count: int) -> list[bytes]:
    """``count`` keys that go to the partitions ``wanted`` only (round robin over them)."""
    out: list[bytes] = []
    i = 0
    while len(out) < count:
        key = b"k%d" % i
        i += 1
        if partition_for_key(key, partitions) in wanted:
            out.append(key)
    return out


def test_batch_rows_equal_the_python_readers(spark: Any, spark_jet: JetDev) -> None:
    """Two streams, one with an empty partition, keyed and keyless records: every column of
    every row the same; startingOffsets/endingOffsets JSON with -2 and -1 too."""
    servers = spark_jet.servers
    one, two = unique("jvm-a"), unique("jvm-b")
    create(servers, one, partitions=4)
    create(servers, two, partitions=2)
    keys = _keys_for(4, {0, 1, 2}, 60)  # partition 3 stays empty
    produce(servers, one, [(k, b"value-%d" % i) for i, k in enumerate(keys)])
    produce(servers, two, [(None if i % 3 else b"x", b"v" * (i * 100)) for i in range(40)])
    streams = f"{one},{two}"

    python = _batch(spark, "jetstream", spark_jet, streams)
    jvm = _batch(spark, JVM_FORMAT, spark_jet, streams)
    assert len(jvm) == 100
    assert jvm == python
    assert {r["partition"] for r in jvm if r["stream"] == one} == {0, 1, 2}
    assert any(r["key"] is None for r in jvm)

    start = orjson.dumps({one: {"0": 2, "1": -2, "2": -1, "3": -2}, two: {"0": 1, "1": 0}})
    end = orjson.dumps({one: {"0": 5, "1": -1, "2": -1, "3": -1}, two: {"0": -1, "1": 3}})
    ranged = {"startingOffsets": start.decode(), "endingOffsets": end.decode()}
    python = _batch(spark, "jetstream", spark_jet, streams, **ranged)
    jvm = _batch(spark, JVM_FORMAT, spark_jet, streams, **ranged)
    assert jvm == python
    assert 0 < len(jvm) < 100


def test_streaming_offsets_and_rows_equal_the_python_readers(
    spark: Any, spark_jet: JetDev, tmp_path: Path
) -> None:
    """The same query over a compacted stream (gaps inside and at the ends of batches),
    maxRecordsPerTrigger 64: the same rows, and the offset logs of the two checkpoints are
    the same bytes."""
    servers = spark_jet.servers
    name = unique("jvm-compact")
    create(servers, name, partitions=2, compact=True, segment_max_bytes=1024, delete_retention=0.0)
    sent = [(f"static-{i}".encode(), b"once") for i in range(10)]
    sent += [(f"user-{i % 10}".encode(), f"version-{i}".encode()) for i in range(190)]
    produce(servers, name, sent, chunk=10)
    _settled(servers, name, lambda records: len(records) < 150)
    kept = _stored(servers, name)

    limit = {"maxRecordsPerTrigger": "64"}
    python = _run(spark, "jetstream", spark_jet, name, tmp_path / "py", **limit)
    jvm = _run(spark, JVM_FORMAT, spark_jet, name, tmp_path / "jvm", **limit)
    assert sorted((r["partition"], r["offset"]) for r in jvm) == kept
    assert _by_offset(jvm) == _by_offset(python)
    logs = _offset_log(tmp_path / "jvm")
    assert len(logs) > 2
    assert logs == _offset_log(tmp_path / "py")


def test_a_checkpoint_carries_over_between_the_readers(
    spark: Any, spark_jet: JetDev, tmp_path: Path
) -> None:
    """The Python reader, the JVM reader, Python again, then the JVM again on one
    checkpoint, 50 new records before each (batches of at most 40): every record once."""
    servers = spark_jet.servers
    name = unique("jvm-switch")
    create(servers, name, partitions=3)
    cp = tmp_path / "cp"
    seen: list[Any] = []
    for round_, fmt in enumerate(("jetstream", JVM_FORMAT, "jetstream", JVM_FORMAT)):
        produce(servers, name, [(b"k%d" % i, b"r%d-%d" % (round_, i)) for i in range(50)])
        got = _run(spark, fmt, spark_jet, name, cp, maxRecordsPerTrigger="40")
        assert len(got) == 50, fmt
        seen.extend(got)
    offsets = sorted((r["partition"], r["offset"]) for r in seen)
    assert offsets == _stored(servers, name)
    assert len(set(offsets)) == 200


def test_retention_gap_as_the_python_reader(spark: Any, spark_jet: JetDev) -> None:
    """Records removed by retention below the start: failOnDataLoss fails the read (naming
    the option), else the read starts at the log start, as the Python reader's."""
    name, log_start, hw = retained_stream(spark_jet.servers, "jvm-logs")
    start = {"startingOffsets": orjson.dumps({name: {"0": 0}}).decode()}

    with pytest.raises(Exception, match="failOnDataLoss") as info:
        _batch(spark, JVM_FORMAT, spark_jet, name, **start)
    assert "log starts at" in str(info.value)
    loose = {**start, "failOnDataLoss": "false"}
    jvm = _batch(spark, JVM_FORMAT, spark_jet, name, **loose)
    assert [r["offset"] for r in jvm] == list(range(log_start, hw))
    assert jvm == _batch(spark, "jetstream", spark_jet, name, **loose)


def test_options_it_lacks_go_to_the_python_reader(
    spark: Any, spark_jet: JetDev, caplog: pytest.LogCaptureFixture
) -> None:
    plain = {"servers": _servers(spark_jet), "streams": "s", "startingOffsets": "earliest"}
    assert source_format(spark, plain) == JVM_FORMAT
    with caplog.at_level(logging.WARNING, logger="jetspark"):
        assert source_format(spark, {**plain, "subjects": "a.>", "group": "g"}) == "jetstream"
    assert "group, subjects" in caplog.text
    tls = {"tls": "true", "tlsCa": "/ca.pem", "tlsServerHostname": "jet.example"}
    assert source_format(spark, {**plain, **tls}) == JVM_FORMAT
    name = unique("jvm-opt")
    create(spark_jet.servers, name, partitions=1)
    with pytest.raises(Exception, match='use format "jetstream"'):
        _batch(spark, JVM_FORMAT, spark_jet, name, subjects="a.>")


def test_the_jar_is_built_once_and_registers_the_format() -> None:
    jar = jar_path()
    assert jar_path() == jar
    with zipfile.ZipFile(jar) as zf:
        names = set(zf.namelist())
        service = zf.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister")
    assert "jet/spark/JetSource.class" in names
    assert service.strip() == b"jet.spark.JetSource"


def test_no_javac_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JETSPARK_JVM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(JavacNotFoundError, match="JAVA_HOME"):
        jar_path()
