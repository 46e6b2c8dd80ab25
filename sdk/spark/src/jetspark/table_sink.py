"""Writing into a table: ``jetspark.foreach_batch_sink(servers, table="prices")``
(spec/spark.md, "Table sink").

A table sink is the foreachBatch sink (:mod:`jetspark.foreach_batch`, exactly-once per
batch by producer id) with a table's rules on top: the target is a compacted stream; every
row has a ``key`` (a null one fails the batch with :class:`~jetspark.errors.ColumnError`);
a row goes to its key's partition, as :class:`jetsdk.Table` writes it (no ``partition`` or
``stream`` column); a null or empty ``value`` deletes the key (a tombstone); a ``headers``
column may carry ``Jet-TTL``. A replayed batch stores nothing again, so it cannot write a
key back over a newer value another writer stored meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.types import StructType

from jetsdk.client import Client
from jetsdk.errors import StreamNotFound
from jetspark.errors import ColumnError, OptionError

__all__ = ["check_table", "check_table_columns", "keyed_rows"]

_NOT_FOR_TABLES = ("partition", "stream")


def check_table_columns(schema: StructType) -> None:
    """A table sink's extra column rules (driver side; :func:`jetspark._write.check_columns`
    checked the rest).

    Raises:
        ColumnError: no ``key`` column, or a ``partition`` or ``stream`` column.
    """
    names = {f.name.lower() for f in schema.fields}
    if "key" not in names:
        raise ColumnError("key", "required by a table sink (a table holds a value per key)")
    for name in _NOT_FOR_TABLES:
        if name in names:
            raise ColumnError(
                name, "not with a table sink: a row goes to its key's partition of the table"
            )


async def check_table(client: Client, table: str) -> None:
    """Raise :class:`OptionError` (option ``table``) unless ``table`` is a compacted
    stream."""
    try:
        info = await client.stream_info(table, refresh=True)
    except StreamNotFound:
        raise OptionError("table", f"stream {table!r} does not exist") from None
    if not info.compact:
        raise OptionError("table", f"stream {table!r} is not compacted: a table is one")


def keyed_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches``, checked to have a key on every row (executor side).

    Raises:
        ColumnError: a row with a null key.
    """
    for batch in batches:
        names = [n.lower() for n in batch.schema.names]
        if "key" not in names or batch.column(names.index("key")).null_count:
            raise ColumnError("key", "a row of a table sink has a null key")
        yield batch
