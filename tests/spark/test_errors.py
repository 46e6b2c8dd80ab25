"""Bad options and bad columns give clear errors that name the option or column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import jetspark
from support.jet_dev import JetDev

from .helpers import create, unique

pytestmark = pytest.mark.spark


def _read(spark: Any, dev: JetDev, **options: str) -> Any:
    reader = spark.read.format("jetstream").option("servers", ",".join(dev.servers))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "'streams'"),
        ({"streams": "x", "streamsPattern": "x.*"}, "'streams'"),
        ({"streams": "orders", "startingOffsets": "yesterday"}, "'startingOffsets'"),
        ({"streams": "orders", "startingOffsets": '{"orders": {"0": -7}}'}, "'startingOffsets'"),
        ({"streams": "orders", "startingOffset": "earliest"}, "did you mean 'startingOffsets'"),
        ({"streams": "orders", "failOnDataLoss": "maybe"}, "'failOnDataLoss'"),
        ({"streams": "orders", "maxRecordsPerTrigger": "10"}, "'maxRecordsPerTrigger'"),
        ({"streams": "no-such-stream"}, "'streams'"),
    ],
)
def test_bad_source_options_name_the_option(
    spark: Any, spark_jet: JetDev, options: dict[str, str], named: str
) -> None:
    create(spark_jet.servers, "orders")
    with pytest.raises(Exception, match=named):
        _read(spark, spark_jet, **options).collect()


def test_bad_streaming_option_fails_the_query_naming_it(
    spark: Any, spark_jet: JetDev, tmp_path: Path
) -> None:
    create(spark_jet.servers, "orders")
    df = (
        spark.readStream.format("jetstream")
        .option("servers", ",".join(spark_jet.servers))
        .option("streams", "orders")
        .option("maxRecordsPerTrigger", "0")
        .load()
    )
    query = (
        df.writeStream.format("console")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="'maxRecordsPerTrigger'"):
        query.awaitTermination(120)


def test_bad_sink_columns_and_options(spark: Any, spark_jet: JetDev) -> None:
    name = unique("sink")
    create(spark_jet.servers, name)
    servers = ",".join(spark_jet.servers)
    no_value = spark.createDataFrame([("k",)], "key string")
    with pytest.raises(Exception, match="column 'value'"):
        no_value.write.format("jetstream").option("servers", servers).option("stream", name).mode(
            "append"
        ).save()
    bad_key = spark.createDataFrame([(1, b"v")], "key int, value binary")
    with pytest.raises(Exception, match="column 'key'"):
        bad_key.write.format("jetstream").option("servers", servers).option("stream", name).mode(
            "append"
        ).save()
    good = spark.createDataFrame([("k", b"v")], "key string, value binary")
    with pytest.raises(Exception, match="option 'stream'"):
        good.write.format("jetstream").option("servers", servers).option(
            "stream", "no-such-stream"
        ).mode("append").save()
    with pytest.raises(jetspark.OptionError, match="'ack'"):
        jetspark.foreach_batch_sink(servers, name, ack="sometimes")
