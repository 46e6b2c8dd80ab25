"""The rows the source produces: the Spark schema and the Arrow conversion of records.

Columns (Spark's Kafka source, with jet's names):

=========  =====================================  =====================================
column     type                                   from the record
=========  =====================================  =====================================
key        binary (null for keyless records)      key
value      binary                                 value
stream     string                                 the stream read
subject    string                                 NATS subject it arrived on
partition  int                                    partition number
offset     bigint                                 offset within the partition
timestamp  timestamp (UTC, microseconds)          server-assigned time
headers    array<struct<key:string,value:binary>> ordered headers (``includeHeaders``)
=========  =====================================  =====================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pyspark.sql.pandas.types import to_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from jetsdk.codec.record import Record

__all__ = ["arrow_schema", "records_to_batch", "source_schema"]

_BASE = (
    "key binary, value binary, stream string, subject string, partition int, "
    "offset bigint, timestamp timestamp"
)
_HEADERS = "headers array<struct<key:string,value:binary>>"


def source_schema(include_headers: bool) -> str:
    """The source's schema as a Spark DDL string."""
    return f"{_BASE}, {_HEADERS}" if include_headers else _BASE


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (as its Python data source checks it)."""
    try:
        result: pa.Schema = to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # PySpark < 4.2: no ``timezone``; timestamps are UTC by default
        result = to_arrow_schema(schema)
    return result


def records_to_batch(
    records: Sequence[Record], stream: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """One Arrow record batch of source rows for ``records`` of one partition.

    Columns are matched by name, so ``schema`` may carry ``headers`` or not. The source
    builds its batches from the record bytes instead (:mod:`jetspark._records`, same
    result without a Python object per row); this row-by-row form is its reference.
    """
    import pyarrow as pa  # here: a worker that asks only for the schema needs no Arrow

    n = len(records)
    columns: dict[str, pa.Array] = {}
    for field in schema:
        name = field.name
        if name == "key":
            data: list[object] = [r.key for r in records]
        elif name == "value":
            data = [r.value for r in records]
        elif name == "stream":
            columns[name] = pa.array([stream] * n, type=field.type)
            continue
        elif name == "subject":
            data = [r.subject for r in records]
        elif name == "partition":
            columns[name] = pa.array([partition] * n, type=field.type)
            continue
        elif name == "offset":
            data = [r.offset for r in records]
        elif name == "timestamp":
            data = [r.timestamp // 1000 for r in records]
        elif name == "headers":
            data = [[{"key": k, "value": v} for k, v in r.headers] for r in records]
        else:
            raise ValueError(f"unexpected column {name!r} in the jetstream source schema")
        columns[name] = pa.array(data, type=field.type)
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)
