"""The ``jetstream`` Spark data source: streaming and batch reads, and the writers' entry.

    jetspark.register(spark)
    df = (spark.readStream.format("jetstream")
          .option("servers", "127.0.0.1:9292").option("streams", "orders")
          .option("startingOffsets", "earliest").load())

Where the pieces run: :class:`JetStreamDataSource` methods run on the driver while Spark
plans; the stream reader's offset methods (``initialOffset``, ``latestOffset``,
``partitions``, ``commit``) run in one long-lived Python process on the driver; ``read`` runs
on executors from a pickled copy of the reader, so readers hold only options and the schema
(connections come from :func:`jetspark._bridge.shared_bridge`, per process).

What needs the SDK's client, pyarrow or another module of the sinks is imported where it is
used: a Python worker that only asks for the schema (Spark's create_data_source) imports
none of it, one that plans or reads imports the client and the reader, never the writers.

Options and semantics: spec/spark.md.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from jetspark._compat import (
    ADMISSION_CONTROL,
    READ_MAX_BYTES,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from jetspark.errors import DataLossError, OptionError
from jetspark.offsets import (
    OffsetRange,
    Offsets,
    from_json,
    limit_bytes,
    limit_offsets,
    pack_ranges,
    plan_ranges,
    to_json,
)
from jetspark.options import SourceOptions, sink_options, source_options
from jetspark.schema import source_schema

if TYPE_CHECKING:
    import pyarrow as pa

    from jetspark._bridge import Bridge
    from jetspark._read import Snapshot

__all__ = [
    "FORMAT",
    "JetBatchReader",
    "JetInputPartition",
    "JetStreamDataSource",
    "JetStreamReader",
]

FORMAT = "jetstream"
"""The format name: ``spark.readStream.format("jetstream")``."""

log = logging.getLogger("jetspark")

_NO_ROW_LIMIT = 2**62
"""A ``ReadMaxRows`` no batch reaches (see ``getDefaultReadLimit``)."""


class JetInputPartition(InputPartition):
    """One Spark partition: :class:`~jetspark.offsets.OffsetRange` s of stream partitions,
    read one after the other (``.value``)."""

    def __init__(self, ranges: tuple[OffsetRange, ...]) -> None:
        super().__init__(ranges)
        self.ranges = ranges
        """The offsets to read, in this order."""


class JetStreamDataSource(DataSource):
    """The ``jetstream`` format (register with :func:`jetspark.register`)."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``jetstream``."""
        return FORMAT

    def schema(self) -> str:
        """The source row schema (spec/spark.md); ``headers`` only with includeHeaders."""
        text = str(self.options.get("includeHeaders", "false")).strip().lower()
        if text not in ("true", "false"):
            raise OptionError("includeHeaders", f"{text!r} is not true or false")
        return source_schema(text == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader (``spark.read``); with option ``table``, a table read
        (:mod:`jetspark.table`)."""
        opts = source_options(self.options, streaming=False)
        if opts.table:
            from jetspark.table import JetTableReader

            return JetTableReader(opts, schema)
        return JetBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A streaming reader (``spark.readStream``)."""
        return JetStreamReader(source_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch writer (``df.write.format("jetstream")``)."""
        from jetspark.writer import JetBatchWriter

        _no_overwrite(overwrite)
        return JetBatchWriter(sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A streaming writer (``df.writeStream.format("jetstream")``), exactly-once per batch."""
        from jetspark.writer import JetStreamWriter

        _no_overwrite(overwrite)
        return JetStreamWriter(sink_options(self.options), schema)


def _bridge(opts: SourceOptions) -> Bridge:
    """This process's bridge to the servers of ``opts`` (imported here: see the module doc)."""
    from jetspark._bridge import shared_bridge

    return shared_bridge(opts.servers, request_timeout=opts.request_timeout, security=opts.security)


def _no_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise OptionError("mode", "streams are append-only: use mode 'append'")


def _cap(latest: Offsets, target: Offsets, begin: Offsets) -> Offsets:
    """``latest`` capped at the AvailableNow ``target``; partitions that appeared after the
    target was taken stay where they are (or out, if new)."""
    out: Offsets = {}
    for stream, parts in latest.items():
        for part, end in parts.items():
            known = begin.get(stream, {}).get(part)
            cap = target.get(stream, {}).get(part)
            if cap is None:
                if known is not None:
                    out.setdefault(stream, {})[part] = known
                continue
            out.setdefault(stream, {})[part] = max(known or 0, min(end, cap))
    return out


def _plan(opts: SourceOptions, start: Offsets, end: Offsets) -> list[JetInputPartition]:
    """The Spark partitions of a read from ``start`` to ``end``: the ranges of
    :func:`~jetspark.offsets.plan_ranges` packed by estimated bytes (option
    maxBytesPerPartition, at least minPartitions of them; spec/spark.md)."""
    ranges = plan_ranges(start, end, min_partitions=opts.min_partitions)
    if len(ranges) <= max(1, opts.min_partitions or 1):
        return [JetInputPartition((r,)) for r in ranges]
    from jetspark._sizes import bytes_per_offset

    bridge = _bridge(opts)
    sizes = bridge.call(bytes_per_offset, bridge.client, sorted({r.stream for r in ranges}))
    groups = pack_ranges(
        ranges, sizes, opts.max_bytes_per_partition, min_groups=opts.min_partitions or 1
    )
    return [JetInputPartition(group) for group in groups]


def _read_partition(
    opts: SourceOptions, schema: StructType, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    from jetspark._read import read_range
    from jetspark.schema import arrow_schema

    ranges = getattr(partition, "ranges", None)
    if not isinstance(ranges, tuple):
        return iter(())  # Spark's placeholder partition when there is nothing to read
    arrow = arrow_schema(schema)
    return itertools.chain.from_iterable(read_range(opts, rng, arrow) for rng in ranges)


class JetBatchReader(DataSourceReader):
    """``spark.read.format("jetstream")``: the offsets between startingOffsets (or
    startingTimestamp) and endingOffsets (or endingTimestamp), as they are when the query
    is planned."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        """The ranges of the stream partitions with records to read (split by
        minPartitions), packed into Spark partitions by maxBytesPerPartition.

        Raises:
            OptionError: a listed stream does not exist, or bad start/end offsets.
        """
        from jetspark._read import resolve_ends, resolve_start, snapshot

        opts = self.opts
        bridge = _bridge(opts)
        snap: Snapshot = bridge.call(snapshot, bridge.client, opts, require=True)
        start = bridge.call(resolve_start, bridge.client, opts, snap)
        end = bridge.call(resolve_ends, bridge.client, opts, snap)
        for stream, parts in start.items():
            for part, begin in parts.items():
                if begin > end[stream][part]:
                    raise OptionError(
                        "startingOffsets",
                        f"{stream}/{part} starts at {begin}, after its end {end[stream][part]}",
                    )
                if opts.fail_on_data_loss and begin < snap[stream][part].log_start:
                    raise DataLossError(
                        stream,
                        part,
                        f"offset {begin} was asked for but the log starts at "
                        f"{snap[stream][part].log_start}",
                    )
        return _plan(opts, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of one range (executor side)."""
        return _read_partition(self.opts, self.schema, partition)


class JetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("jetstream")`` (see the module doc for where it runs)."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._mirrored: Offsets = {}
        self._last_trigger = float("-inf")
        """When latestOffset last let a batch with new offsets through (monotonic)."""
        self._planned: Offsets | None = None
        """The end of the last batch planned (PySpark < 4.2: the next batch's start)."""

    # -- driver side ------------------------------------------------------------------

    def _snapshot(self, *, require: bool) -> Snapshot:
        from jetspark._read import snapshot

        bridge = _bridge(self.opts)
        return bridge.call(snapshot, bridge.client, self.opts, require=require)

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts (startingTimestamp, else startingOffsetsByTimestamp,
        else startingOffsets; default latest). A restarted query starts from its
        checkpoint instead."""
        from jetspark._read import resolve_start

        opts = self.opts
        snap = self._snapshot(require=True)
        bridge = _bridge(opts)
        start = bridge.call(resolve_start, bridge.client, opts, snap)
        self._planned = start
        return to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxRecordsPerTrigger as ``ReadMaxRows``, else maxBytesPerTrigger as
        ``ReadMaxBytes``, else ``ReadAllAvailable``.

        Spark's Python API has no composite limit: with both options the limit is
        ``ReadMaxRows`` and ``latestOffset`` applies maxBytesPerTrigger as well (it applies
        both options whenever Spark passes a limit other than ``ReadAllAvailable``). Where
        PySpark has admission control but no ``ReadMaxBytes``, maxBytesPerTrigger alone
        is handed over as a row limit no batch reaches, for the same reason.
        """
        opts = self.opts
        if opts.max_records_per_trigger is not None:
            return ReadMaxRows(opts.max_records_per_trigger)
        if opts.max_bytes_per_trigger is not None:
            if READ_MAX_BYTES or not ADMISSION_CONTROL:
                return ReadMaxBytes(opts.max_bytes_per_trigger)
            return ReadMaxRows(_NO_ROW_LIMIT)
        return ReadAllAvailable()

    def _limits(self, limit: ReadLimit | None) -> tuple[int | None, int | None]:
        """The (offsets, bytes) limits of a batch under ``limit``: none for
        ``ReadAllAvailable`` (or no limit), else this source's options (the tighter of
        Spark's limit and the option for the kind Spark passes)."""
        opts = self.opts
        rows, size = opts.max_records_per_trigger, opts.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            rows = limit.max_rows if limit.max_rows < _NO_ROW_LIMIT else rows
            return rows, size
        if isinstance(limit, ReadMaxBytes):
            return rows, limit.max_bytes
        return None, None

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: remember the high watermarks now; never read past them."""
        self._target = self._latest_offsets(self._snapshot(require=False), {})

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch: the high watermarks (capped by the
        AvailableNow target), limited by ``limit`` (maxRecordsPerTrigger).

        Partitions that appeared since ``start`` are included from their log start.

        PySpark 4.0 and 4.1 call it without arguments: the start is then the end of the
        last batch Spark planned (``partitions``; at a restart Spark passes the
        checkpoint's latest offsets to ``partitions`` first), else the initial offsets, and
        the limit is maxRecordsPerTrigger (spec/spark.md, "Admission control").

        Raises:
            DataLossError: with failOnDataLoss, a partition of ``start`` is gone, lost
                records to retention past ``start``, or its log ends below ``start``.
        """
        if start is not None:
            begin = from_json(start)
            # Spark asks for the next batch only once the previous one is committed, so
            # ``start`` is processed: mirror it (commit() alone misses the last batch of a
            # query, whose commit Spark issues when planning the batch after it).
            self._mirror(begin)
        else:
            # A new query: Spark asks for the latest offset before the initial one.
            begin = self._planned if self._planned is not None else from_json(self.initialOffset())
        rows, size = (
            self._limits(limit)
            if start is not None
            else (self.opts.max_records_per_trigger, self.opts.max_bytes_per_trigger)
        )
        snap = self._snapshot(require=False)
        latest = self._latest_offsets(snap, begin)
        self._latest = latest
        if self._target is not None:
            latest = _cap(latest, self._target, begin)
        if self._wait_for_more(snap, begin, latest):
            return to_json(begin)
        if rows is not None or size is not None:
            # New partitions count from their log start, so a partition that gets no share
            # this time is checkpointed there, never below records retention removed.
            base = {stream: dict(parts) for stream, parts in begin.items()}
            for stream, parts in snap.items():
                for part, info in parts.items():
                    base.setdefault(stream, {}).setdefault(part, info.log_start)
            if rows is not None:
                latest = limit_offsets(base, latest, rows)
            if size is not None:
                from jetspark._sizes import bytes_per_offset

                bridge = _bridge(self.opts)
                sizes = bridge.call(bytes_per_offset, bridge.client, sorted(latest))
                latest = limit_bytes(base, latest, size, sizes)
        return to_json(latest)

    def _wait_for_more(self, snap: Snapshot, begin: Offsets, latest: Offsets) -> bool:
        """minOffsetsPerTrigger: True to hold the next batch back (fewer new offsets than
        the minimum, and less than maxTriggerDelay since the last batch; never under
        Trigger.AvailableNow, never for the first batch)."""
        minimum = self.opts.min_offsets_per_trigger
        if minimum is None or self._target is not None:
            return False
        new = 0
        for stream, parts in latest.items():
            for part, end in parts.items():
                known = begin.get(stream, {}).get(part)
                if known is None:
                    info = snap.get(stream, {}).get(part)
                    known = info.log_start if info is not None else end
                new += max(0, end - known)
        if new == 0:
            return False
        now = time.monotonic()
        if new < minimum and now - self._last_trigger < self.opts.max_trigger_delay_s:
            return True
        self._last_trigger = now
        return False

    def _latest_offsets(self, snap: Snapshot, begin: Offsets) -> Offsets:
        fail = self.opts.fail_on_data_loss
        latest: Offsets = {
            stream: {p: info.hw for p, info in parts.items()} for stream, parts in snap.items()
        }
        for stream, parts in begin.items():
            for part, offset in parts.items():
                info = snap.get(stream, {}).get(part)
                if info is None:
                    if fail:
                        raise DataLossError(stream, part, "the stream or partition is gone")
                    log.warning("jetstream %s/%s is gone; no longer read", stream, part)
                    continue
                if info.hw < offset:
                    if fail:
                        raise DataLossError(
                            stream,
                            part,
                            f"the high watermark {info.hw} is below the checkpointed offset "
                            f"{offset} (truncated, or the stream was recreated)",
                        )
                    latest[stream][part] = offset  # wait for the log to pass it again
                elif fail and offset < info.log_start and offset < info.hw:
                    raise DataLossError(
                        stream,
                        part,
                        f"offsets {offset}..{info.log_start - 1} were removed (retention) "
                        "before the query read them",
                    )
        return latest

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The high watermarks seen by the last latestOffset call (for query progress)."""
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The ranges of the stream partitions with new offsets (split by minPartitions),
        packed into Spark partitions by maxBytesPerPartition."""
        self._planned = from_json(end)
        return _plan(self.opts, from_json(start), self._planned)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished the batch ending at ``end``: mirror it as the commits of consumer
        group ``group`` (option) when set (failures are logged, not raised: the checkpoint is the
        truth, the mirror is for lag tools)."""
        self._mirror(from_json(end))

    def _mirror(self, offsets: Offsets) -> None:
        group = self.opts.group
        if group is None:
            return
        changed = {
            stream: {p: o for p, o in parts.items() if self._mirrored.get(stream, {}).get(p) != o}
            for stream, parts in offsets.items()
        }
        changed = {s: p for s, p in changed.items() if p}
        if not changed:
            return
        try:
            from jetspark.offsets_mirror import write_offsets

            bridge = _bridge(self.opts)
            bridge.call(write_offsets, bridge.client, group, changed)
        except Exception as exc:
            log.warning("jetstream: could not mirror offsets of group %r: %s", group, exc)
            return
        for stream, parts in changed.items():
            self._mirrored.setdefault(stream, {}).update(parts)

    # -- executor side ----------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of a partition's ranges, exactly ``[start, end)`` of each, one range
        after the other (executor side)."""
        return _read_partition(self.opts, self.schema, partition)
