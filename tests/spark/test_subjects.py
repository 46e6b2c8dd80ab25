"""The sinks' ``subject`` column and the source's ``subjects`` filter (spec/spark.md),
against a real server without a JVM: rows written with subjects by the sinks' task writer
are stored on those subjects, and the stream reader returns only the records whose subject
matches the patterns (NATS wildcards, as the server matches them)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from jetsdk.errors import InvalidArgument
from jetserver.metadata.validate import subject_matches
from jetspark import _write
from jetspark.errors import OptionError
from jetspark.options import sink_options, source_options
from support.jet_dev import JetDev

from .helpers import create, read_all, unique

PATTERNS = ["a.b", "a.*", "a.>", "*.b", "*.*.c", ">", "a.*.>"]
SUBJECTS = ["a", "a.b", "a.c", "a.b.c", "x.b", "x.y.c", "a.b.c.d", "ab.b", "a.bb"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_subject_patterns_match_as_the_server_matches(pattern: str) -> None:
    import re

    opts = source_options({"servers": "h:1", "streams": "s", "subjects": pattern}, streaming=True)
    regex = opts.subject_regex()
    assert regex is not None
    for subject in SUBJECTS:
        assert (re.search(regex, subject) is not None) == subject_matches(pattern, subject), subject


@pytest.mark.parametrize("bad", ["", "a..b", "a.>.b", "a.b*", "a b"])
def test_bad_subject_patterns_name_the_option(bad: str) -> None:
    with pytest.raises(OptionError, match="'subjects'"):
        source_options({"servers": "h:1", "streams": "s", "subjects": bad}, streaming=True)


def _reader(dev: JetDev, stream: str, subjects: str) -> Any:
    from pyspark.sql import types as T

    from jetspark.source import JetStreamReader

    raw = {
        "servers": ",".join(dev.servers),
        "streams": stream,
        "startingOffsets": "earliest",
        "subjects": subjects,
    }
    fields = [
        ("key", T.BinaryType()),
        ("value", T.BinaryType()),
        ("stream", T.StringType()),
        ("subject", T.StringType()),
        ("partition", T.IntegerType()),
        ("offset", T.LongType()),
        ("timestamp", T.TimestampType()),
    ]
    schema = T.StructType([T.StructField(n, t) for n, t in fields])
    return JetStreamReader(source_options(raw, streaming=True), schema)


def _values(reader: Any) -> list[bytes]:
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    out = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            out.extend(batch.column(batch.schema.get_field_index("value")).to_pylist())
    return out


def test_sink_subject_column_and_source_subjects_filter(spark_jet: JetDev) -> None:
    servers = spark_jet.servers
    name = unique("subjects")
    prefix = name.replace("-", "")
    create(servers, name, subject=f"{prefix}.>")
    subjects = [f"{prefix}.eu.a", f"{prefix}.us.b", f"{prefix}.eu.c.d", f"{prefix}.eu.e"]
    opts = sink_options({"servers": ",".join(servers), "stream": name})
    batch = pa.RecordBatch.from_pydict(
        {"value": [b"v%d" % i for i in range(4)], "subject": subjects, "offset": [0, 1, 2, 3]}
    )
    stats = _write.write_batches(opts, _write.producer_id_for("subjects", name), 0, [batch])
    assert stats.written == 4
    assert [r.subject for r in read_all(servers, name)] == subjects

    assert _values(_reader(spark_jet, name, f"{prefix}.eu.*")) == [b"v0", b"v3"]
    assert _values(_reader(spark_jet, name, f"{prefix}.eu.>")) == [b"v0", b"v2", b"v3"]
    assert _values(_reader(spark_jet, name, f"{prefix}.us.*, {prefix}.*.c.>")) == [b"v1", b"v2"]

    # a subject outside the stream's pattern is refused by the server (the whole request)
    other = pa.RecordBatch.from_pydict({"value": [b"x"], "subject": ["elsewhere.x"]})
    with pytest.raises(InvalidArgument, match="does not match partition subject"):
        _write.write_batches(opts, _write.producer_id_for("subjects-bad", name), 0, [other])
