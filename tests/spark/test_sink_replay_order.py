"""A writer task that dies after sending part of its rows, then its replay with the same
rows in another order (and other Arrow batch cuts), against a real server: the replay
stores exactly the missing rows (spec/spark.md "Row order"). No JVM: the sinks' task
writer (jetspark._write) is driven directly, the crash is a subclass that stops sending."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from jetspark import _write
from jetspark.options import sink_options
from support.jet_dev import JetDev

from .arrow_rows import arrow_batches
from .helpers import create, read_all, unique

PARTITIONS = 3


class _Crash(Exception):
    pass


class _DyingWriter(_write._TaskWriter):
    """Sends ``requests`` Produce requests (waiting for their acks), then dies."""

    def __init__(self, *args: Any, requests: int) -> None:
        super().__init__(*args)
        self.left = requests

    def ship(self, stream: str, partition: int, target: Any) -> None:
        if self.left == 0:
            for (name, part), other in self.targets.items():
                self.settle(name, part, other)
            raise _Crash
        self.left -= 1
        super().ship(stream, partition, target)


def _batches(rows: list[dict[str, Any]], rng: random.Random) -> list[pa.RecordBatch]:
    return arrow_batches(rows, rng, [1, 50, 333, 900])


@pytest.mark.parametrize("with_offsets", [False, True])
def test_a_replay_in_another_order_stores_exactly_the_missing_rows(
    spark_jet: JetDev, monkeypatch: pytest.MonkeyPatch, with_offsets: bool
) -> None:
    monkeypatch.setattr(_write, "MAX_CHUNK_MESSAGES", 100)  # several requests per partition
    rng = random.Random(7)
    rows = [
        {
            "key": rng.choice([None, b"k%d" % rng.randrange(30)]),
            "value": b"v%d" % rng.randrange(500),
        }
        for _ in range(2000)
    ]
    rows += [dict(r) for r in rows[:300]]  # identical copies: each stored once per copy
    if with_offsets:
        for i, row in enumerate(rows):
            row["offset"] = 1000 + i
    servers = spark_jet.servers
    name = unique("replay-order")
    create(servers, name, partitions=PARTITIONS)
    opts = sink_options({"servers": ",".join(servers), "stream": name})
    producer_id = _write.producer_id_for("test", name)

    dying = _DyingWriter(opts, producer_id, 3, requests=9)
    for batch in _batches(rows, rng):
        dying.add_batch(batch)
    with pytest.raises(_Crash):
        dying.finish()
    stored_first = len(read_all(servers, name))
    assert 0 < stored_first < len(rows)

    shuffled = list(rows)
    rng.shuffle(shuffled)
    stats = _write.write_batches(opts, producer_id, 3, _batches(shuffled, rng))
    assert stats.duplicates == stored_first
    assert stats.written == len(rows) - stored_first
    got = read_all(servers, name)
    assert Counter((r.key, r.value) for r in got) == Counter((r["key"], r["value"]) for r in rows)
