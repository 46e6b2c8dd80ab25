"""The JVM reader (format ``jetstream-jvm``) in its read modes and with the options it
shares with the Python source since issue 39: several ranges a task (FetchStream or Fetch),
the headers column, and a token or user + password against a server with authentication:
rows the same as the Python reader's, against real servers and a real Spark."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from jetsdk import AckPolicy, Client, Producer
from jetserver.security.passwords import hash_password, hash_token
from jetspark.jvm import JVM_FORMAT
from support.jet_dev import JetDev
from support.jet_server import running_server
from support.nats_server import NatsServer

from .helpers import create, produce, unique
from .test_jvm_reader import _batch, _by_offset, _offset_log, _run

pytestmark = pytest.mark.spark

TOKEN = "spark-jvm-token-0123456789-abcdef"
MODES = [
    {"fetchStream": stream, "groupPartitions": group}
    for stream in ("true", "false")
    for group in ("true", "false")
]


def _tasks(spark: Any, dev: JetDev, stream: str, **options: str) -> int:
    """Spark partitions (tasks) of a batch read of ``stream`` with ``options``."""
    reader = spark.read.format(JVM_FORMAT).option("servers", ",".join(dev.servers))
    df = reader.option("streams", stream).options(**options).load()
    return int(df.rdd.getNumPartitions())


def _six_partitions(dev: JetDev, prefix: str) -> str:
    name = unique(prefix)
    create(dev.servers, name, partitions=6)
    produce(dev.servers, name, [(b"k%d" % i, b"v" * (i % 50) * 100) for i in range(300)])
    return name


def test_a_task_reads_several_ranges_in_every_mode(spark: Any, spark_jet: JetDev) -> None:
    """Six partitions on local[2]: two tasks of three ranges each (FetchStream or Fetch), or
    one task a range (groupPartitions false, or minPartitions above the slots); the rows of
    every mode are the Python reader's."""
    name = _six_partitions(spark_jet, "jvm-modes")
    python = _batch(spark, "jetstream", spark_jet, name)
    assert len(python) == 300
    for mode in MODES:
        assert _batch(spark, JVM_FORMAT, spark_jet, name, **mode) == python, mode
    assert _tasks(spark, spark_jet, name) == 2
    assert _tasks(spark, spark_jet, name, groupPartitions="false") == 6
    assert _tasks(spark, spark_jet, name, minPartitions="12") == 12


def test_streams_ended_at_a_batch_end_write_the_python_offsets(
    spark: Any, spark_jet: JetDev, tmp_path: Path
) -> None:
    """maxRecordsPerTrigger 70 over six partitions: each range ends below the high
    watermark, so its FetchStream is cancelled there; grouped with FetchStream and one Fetch
    range a task, the rows and the offset log are the Python reader's."""
    name = _six_partitions(spark_jet, "jvm-cancel")
    limit = {"maxRecordsPerTrigger": "70"}
    expected = _run(spark, "jetstream", spark_jet, name, tmp_path / "py", **limit)
    assert len(expected) == 300
    for i, mode in enumerate((MODES[0], MODES[-1])):
        cp = tmp_path / f"jvm-{i}"
        rows = _run(spark, JVM_FORMAT, spark_jet, name, cp, **limit, **mode)
        assert _by_offset(rows) == _by_offset(expected), mode
        assert _offset_log(cp) == _offset_log(tmp_path / "py"), mode


def test_answers_read_ahead_into_reused_buffers(spark: Any, spark_jet: JetDev) -> None:
    """readAhead (the default) reads a task's answers on a thread of its own into a few
    buffers it reuses: with answers of at most 4 KiB (about 70 a range, each range's
    FetchStream and Fetch), values from empty to three times an answer's bytes (a record
    larger than fetchMaxBytes is asked for again whole, into a larger buffer), the rows are
    the Python reader's, with and without readAhead."""
    name = unique("jvm-ahead")
    create(spark_jet.servers, name, partitions=3)
    sizes = [0, 1, 100, 4000, 12_288, 700, 3]
    produce(
        spark_jet.servers,
        name,
        [(b"k%d" % i, bytes([i % 251]) * sizes[i % len(sizes)]) for i in range(420)],
    )
    python = _batch(spark, "jetstream", spark_jet, name)
    assert len(python) == 420
    small = {"fetchMaxBytes": "4096"}
    for ahead in ("true", "false"):
        for stream in ("true", "false"):
            mode = {"readAhead": ahead, "fetchStream": stream, **small}
            assert _batch(spark, JVM_FORMAT, spark_jet, name, **mode) == python, mode


def test_headers_as_the_python_reader(spark: Any, spark_jet: JetDev) -> None:
    """includeHeaders: the headers column (in order, empty values and none at all too) is
    the Python reader's; without the option neither reader has the column."""
    servers = spark_jet.servers
    name = unique("jvm-headers")
    create(servers, name, partitions=3)
    headers = [("trace", b"t-1"), ("empty", b""), ("trace", b"t-2"), ("\u00e9t\u00e9", b"\x00")]
    produce(servers, name, [(b"h%d" % i, b"with") for i in range(30)], headers=headers)
    produce(servers, name, [(b"n%d" % i, b"without") for i in range(10)])

    python = _batch(spark, "jetstream", spark_jet, name, includeHeaders="true")
    jvm = _batch(spark, JVM_FORMAT, spark_jet, name, includeHeaders="true")
    assert jvm == python
    got = {
        (bytes(r["value"]), tuple((h["key"], bytes(h["value"])) for h in r["headers"])) for r in jvm
    }
    assert got == {(b"with", tuple(headers)), (b"without", ())}
    plain = _batch(spark, JVM_FORMAT, spark_jet, name)
    assert "headers" not in plain[0].asDict()
    assert [r.asDict() for r in plain] == [
        {k: v for k, v in r.asDict().items() if k != "headers"} for r in jvm
    ]


def _auth_settings() -> dict[str, object]:
    return {
        "auth__enabled": True,
        "auth__users": (f"alice={hash_password('s3cret')}",),
        "auth__tokens": (f"bot={hash_token(TOKEN)}",),
        "auth__acls": ("alice:admin:*", "alice:publish:*", "alice:fetch:*", "bot:fetch:*"),
    }


def _read(spark: Any, server: str, stream: str, fmt: str, **options: str) -> list[Any]:
    reader = spark.read.format(fmt).option("servers", server).option("streams", stream)
    rows = reader.options(**options).load().collect()
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


@pytest.mark.anyio
async def test_token_and_password_against_a_server_with_auth(
    spark: Any, nats_server: NatsServer, tmp_path: Path
) -> None:
    """With a token, or a user and password, the JVM reader reads what the Python reader
    reads; without credentials it fails naming the options, with a wrong token it fails
    UNAUTHENTICATED (and the token is not in the message)."""
    async with running_server(nats_server.url, tmp_path / "data", **_auth_settings()) as jet:
        async with Client(jet.address, user="alice", password="s3cret") as client:
            await client.create_stream("jvm-auth", "jvm.auth", partitions=3)
            async with Producer(client, "jvm-auth", ack=AckPolicy.ALL) as producer:
                for i in range(40):
                    await producer.send_soon(b"v%d" % i, b"k%d" % i)
                await producer.flush()

        async def read(fmt: str, **options: str) -> list[Any]:
            run = partial(_read, spark, jet.address, "jvm-auth", fmt, **options)
            return await anyio.to_thread.run_sync(run)

        python = await read("jetstream", token=TOKEN)
        assert len(python) == 40
        assert await read(JVM_FORMAT, token=TOKEN) == python
        assert await read(JVM_FORMAT, user="alice", password="s3cret") == python
        with pytest.raises(Exception, match="give option token, or user and password"):
            await read(JVM_FORMAT)
        with pytest.raises(Exception, match="UNAUTHENTICATED") as info:
            await read(JVM_FORMAT, token="not-the-token")
        assert "not-the-token" not in str(info.value)
