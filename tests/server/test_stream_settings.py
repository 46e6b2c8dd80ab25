"""Stream settings through the real jet port (issue 31, cases 2 and 3).

Before: a ``duplicate_window_s`` of 1e300 was accepted at create; then every ingest batch
holding a ``Nats-Msg-Id`` raised OverflowError in the sequencer and was dropped whole. A
``segment_max_bytes`` of 2^40 was accepted by the validator and failed when the log opened,
seconds later, as a retriable STORAGE_ERROR. Now both are INVALID_ARGUMENT naming the field,
at once, and the largest accepted values work.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.stream_settings import MAX_DURATION_S, MAX_SEGMENT_MAX_BYTES
from jetserver.metadata.store import METADATA_FILE
from jetserver.server import Server
from jetserver.testing import nats_flushed
from support.jet_server import start_server_process, stopping
from support.nats_server import NatsServer
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio

JET = [sys.executable, "-m", "jetserver.cli.main"]
PLAIN_MESSAGES = 400
REFUSAL_BOUND_S = 2.0


async def _publish_around_one_msg_id(nc: NatsClient, subject: str) -> None:
    for i in range(PLAIN_MESSAGES):
        headers = {"Nats-Msg-Id": "the-one"} if i == PLAIN_MESSAGES // 2 else None
        await nc.publish(subject, b"m%d" % i, headers=headers)
    await nats_flushed(nc, 10)


@pytest.mark.parametrize("window", [1e300, 2**63, 1.7976931348623157e308, MAX_DURATION_S + 1])
async def test_huge_duplicate_window_is_refused_at_create(
    jet: Server, nc: NatsClient, window: float
) -> None:
    async with await RawClient.connect(jet.address) as c:
        refused: ServerError | None = None
        try:
            await c.create_stream(name="dw", subject="dw", duplicate_window_s=window)
        except ServerError as err:
            refused = err
        if refused is None:
            # Accepted (the old code): then every message must be stored anyway.
            await _publish_around_one_msg_id(nc, "dw")
            records = await c.collect("dw", 0, PLAIN_MESSAGES, timeout_s=10)
            assert len(records) == PLAIN_MESSAGES
            return
    assert refused.code == ErrorCode.INVALID_ARGUMENT
    assert refused.error.details["field"] == "duplicate_window_s"
    assert "duplicate_window_s" in str(refused)


async def test_largest_duplicate_window_stores_every_message(jet: Server, nc: NatsClient) -> None:
    async with await RawClient.connect(jet.address) as c:
        created = await c.create_stream(name="dw", subject="dw", duplicate_window_s=MAX_DURATION_S)
        assert created["stream"]["config"]["duplicate_window_s"] == MAX_DURATION_S
        await _publish_around_one_msg_id(nc, "dw")
        records = await c.collect("dw", 0, PLAIN_MESSAGES, timeout_s=10)
    assert [r.value for r in records] == [b"m%d" % i for i in range(PLAIN_MESSAGES)]


async def test_segment_max_bytes_over_the_limit_is_invalid_argument_at_once(jet: Server) -> None:
    async with await RawClient.connect(jet.address) as c:
        started = time.monotonic()
        with pytest.raises(ServerError) as err:
            await c.create_stream(name="big", subject="big", segment_max_bytes=2**40)
        took = time.monotonic() - started
        assert err.value.code == ErrorCode.INVALID_ARGUMENT
        assert err.value.error.details["field"] == "segment_max_bytes"
        assert took < REFUSAL_BOUND_S
        # The largest allowed size works, and the server still serves.
        created = await c.create_stream(
            name="big", subject="big", segment_max_bytes=MAX_SEGMENT_MAX_BYTES
        )
    assert created["created"] is True


NAN = math.nan
INF = math.inf

# field -> values refused (each alone, on an otherwise valid request).
REFUSED: dict[str, list[Any]] = {
    "partitions": [0, -1, 1025, 2**63, 1.0, "2", True, [1], {"n": 1}],
    "replication_factor": [0, -1, 2**63, 1.5, "1", False],
    "segment_max_bytes": [0, -1, 1023, 2**31, 2**40, 2**63, 1024.0, "1024", True],
    "segment_max_age_s": [0, -1, NAN, INF, -INF, 2**63, 1e300, "1", True, [1]],
    "retention_max_age_s": [0, -1.5, NAN, INF, 1e300, 2**63, "x", True],
    "retention_max_bytes": [0, -1, 2**63, 1.0, "1", True],
    "retention_max_messages": [0, -1, 2**63, 2.5, "1", False],
    "delete_retention_s": [-1, NAN, INF, -INF, 1e300, 2**63, "0", True],
    "max_message_bytes": [0, -1, 2**63, 1.0, "1", True],
    "min_isr": [0, -1, 2, 2**63, 1.0, "1", True],
    "duplicate_window_s": [-1, NAN, INF, -INF, 1e300, 2**63, "1", True, {}],
    "durability": ["always", 1, True, []],
    "compact": [1, "true", 0, []],
    "internal": [1, "false"],
    "group": [1, "", "a b", True, []],
    "no_such_setting": [1, None, "x"],
}
CASES = [
    (field, value)
    for field, values in REFUSED.items()
    for value in values
    if not (isinstance(value, float) and not math.isfinite(value))
]


async def test_every_setting_is_refused_with_its_name(jet: Server) -> None:
    """One connection, every (field, bad value) pair: INVALID_ARGUMENT naming the field,
    and the server keeps answering (a valid create at the end)."""
    async with await RawClient.connect(jet.address) as c:
        wrong: list[str] = []
        for field, value in CASES:
            try:
                await c.create_stream(name="t", subject="t", **{field: value})
            except ServerError as err:
                if (
                    err.code != ErrorCode.INVALID_ARGUMENT
                    or err.error.details.get("field") != field
                ):
                    wrong.append(f"{field}={value!r}: {err.code!r} {err.error.details}")
                continue
            wrong.append(f"{field}={value!r}: accepted")
            await c.delete_stream("t")
        assert wrong == []
        assert (await c.create_stream(name="t", subject="t"))["created"] is True


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("NaN", ErrorCode.MALFORMED_FRAME),
        ("Infinity", ErrorCode.MALFORMED_FRAME),
        ("1e999", ErrorCode.MALFORMED_FRAME),
        ("18446744073709551616", ErrorCode.INVALID_ARGUMENT),  # orjson: a float, 1.8e19
        ("1e300", ErrorCode.INVALID_ARGUMENT),
    ],
)
async def test_numbers_json_cannot_carry_are_refused(jet: Server, text: str, code: int) -> None:
    """NaN and infinities are not JSON (orjson writes them as null, so they go as raw
    text): MALFORMED_FRAME, and that connection is closed as for any undecodable body.
    Numbers JSON can carry but the limits refuse name the field. The server keeps
    serving."""
    body = b'{"name":"t","subject":"t","duplicate_window_s":' + text.encode() + b"}"
    async with await RawClient.connect(jet.address) as c:
        with pytest.raises(ServerError) as err:
            await c.request(Api.CREATE_STREAM, body)
    assert err.value.code == code
    if code == ErrorCode.INVALID_ARGUMENT:
        assert err.value.error.details["field"] == "duplicate_window_s"
    async with await RawClient.connect(jet.address) as c:
        assert (await c.create_stream(name="t", subject="t"))["created"] is True


async def test_stored_settings_beyond_the_limits_are_clamped_and_the_stream_serves(
    nats_server: NatsServer, nc: NatsClient, tmp_path: Path
) -> None:
    """metadata.json written by an older version that accepted huge values: the server
    starts, clamps each to its limit with a warning naming the stream and the setting,
    and stores every message (before: OverflowError at ingest and at retention)."""
    data = tmp_path / "data"
    with stopping(start_server_process(nats_server.url, data, "--log-level", "INFO")) as proc:
        async with await RawClient.connect(proc.address) as c:
            await c.create_stream(name="old", subject="old", compact=True)
    path = data / METADATA_FILE
    state = json.loads(path.read_text())
    state["streams"][0]["spec"].update(
        duplicate_window_s=1e300,
        retention_max_age_s=1e300,
        delete_retention_s=1e300,
        segment_max_bytes=2**40,
        retention_max_bytes=2**64,  # no JSON writer of ours can, but a hand edit can
        min_isr=7,
    )
    path.write_text(json.dumps(state))
    with stopping(start_server_process(nats_server.url, data, "--log-level", "INFO")) as proc:
        async with await RawClient.connect(proc.address) as c:
            config = (await c.describe("old"))["config"]
            await _publish_around_one_msg_id(nc, "old")
            records = await c.collect("old", 0, PLAIN_MESSAGES, timeout_s=10)
        log_text = proc.log_tail(200_000)
    assert len(records) == PLAIN_MESSAGES
    assert config["duplicate_window_s"] == MAX_DURATION_S
    assert config["retention_max_age_s"] == MAX_DURATION_S
    assert config["delete_retention_s"] == MAX_DURATION_S
    assert config["segment_max_bytes"] == MAX_SEGMENT_MAX_BYTES
    assert config["retention_max_bytes"] is None  # a wrong type: no limit, never a smaller one
    assert config["min_isr"] == 1
    for field in ("duplicate_window_s", "segment_max_bytes", "retention_max_bytes", "min_isr"):
        assert f"{field}: stored value" in log_text, field
    assert "clamped" in log_text
    assert "OverflowError" not in log_text
    assert "Traceback" not in log_text


def test_a_server_default_segment_size_beyond_the_limit_stops_the_start(tmp_path: Path) -> None:
    """A server-wide default that feeds stream settings is checked at start: exit 2, the
    setting named, before anything is opened."""
    for var, value, fragment in [
        ("JET_STORAGE_SEGMENT_MAX_BYTES", str(2**40), "storage.segment_max_bytes"),
        ("JET_STORAGE_SEGMENT_MAX_BYTES", "100", "storage.segment_max_bytes"),
        ("JET_STORAGE_SEGMENT_MAX_AGE_S", "1e300", "storage.segment_max_age_s"),
        ("JET_STORAGE_SEGMENT_MAX_AGE_S", "inf", "storage.segment_max_age_s"),
    ]:
        env = {**os.environ, var: value}
        result = subprocess.run(
            [*JET, "server", "--data-dir", str(tmp_path / "d")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
        assert result.returncode == 2, (var, value, result.stderr)
        assert fragment in result.stderr, (var, value, result.stderr)
        assert "configuration error" in result.stderr
    assert not (tmp_path / "d" / METADATA_FILE).exists()
