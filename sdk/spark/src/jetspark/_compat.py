"""What differs between the PySpark versions jetspark runs on (4.0, 4.1, 4.2+).

- 4.2 added admission control to the Python Data Source API (``latestOffset(start,
  limit)``, ``getDefaultReadLimit``, :mod:`pyspark.sql.streaming.datasource` with the
  read limits and ``SupportsTriggerAvailableNow``). Before it, Spark calls
  ``latestOffset()`` without arguments and the reader applies maxRecordsPerTrigger itself
  (:class:`jetspark.source.JetStreamReader`); the read-limit classes below stand in.
- ``ReadMaxBytes`` (maxBytesPerTrigger as Spark's read limit) is used where
  :mod:`pyspark.sql.streaming.datasource` has it; elsewhere the reader applies
  maxBytesPerTrigger itself.
- 4.1 added ``DataSourceStreamArrowWriter``; on 4.0 the streaming writer gets rows and
  turns them into Arrow batches (:mod:`jetspark.writer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import datasource as _datasource

__all__ = [
    "ADMISSION_CONTROL",
    "READ_MAX_BYTES",
    "STREAM_ARROW_WRITER",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxBytes",
    "ReadMaxRows",
    "StreamWriterBase",
    "SupportsTriggerAvailableNow",
]

try:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
    """Spark passes the batch start and a read limit to ``latestOffset`` (PySpark 4.2+)."""
except ImportError:  # PySpark 4.0, 4.1
    ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in for PySpark 4.2's ReadLimit."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in for PySpark 4.2's ReadAllAvailable."""

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in for PySpark 4.2's ReadMaxRows."""

        max_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: before 4.2 Spark wraps the reader for Trigger.AvailableNow itself."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Not called before PySpark 4.2."""


try:
    from pyspark.sql.streaming.datasource import ReadMaxBytes

    READ_MAX_BYTES = True
    """Spark's Python sources may return ``ReadMaxBytes`` as their read limit."""
except ImportError:  # PySpark before ReadMaxBytes
    READ_MAX_BYTES = False

    @dataclass
    class ReadMaxBytes(ReadLimit):  # type: ignore[no-redef]
        """Stand-in for PySpark's ReadMaxBytes (never handed to Spark)."""

        max_bytes: int


_arrow_writer: Any = getattr(_datasource, "DataSourceStreamArrowWriter", None)
STREAM_ARROW_WRITER = _arrow_writer is not None
"""The streaming writer gets Arrow batches (PySpark 4.1+); else it gets rows."""
StreamWriterBase: Any = _arrow_writer or _datasource.DataSourceStreamWriter
"""The base class of :class:`jetspark.writer.JetStreamWriter`."""
