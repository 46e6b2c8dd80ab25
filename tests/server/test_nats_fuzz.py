"""The NATS ingest fuzzer, bounded for CI (issue 31; the long campaign: nox -s fuzz_nats).

Raw-socket publishers send a few thousand random ``PUB``/``HPUB`` messages (odd framing,
header blocks well-formed, odd, huge and malformed, payloads of any bytes and size) to
four streams' subjects and to noise subjects, against a live nats-server and a jet server
in its own process. Every message sent to a stream must be stored exactly once, with the
value and headers spec/envelope.md says, in each publisher's order; a canary stream's
acks must keep coming; the server must still serve. Set ``JET_FUZZ_SEED`` to replay a run.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from jetserver.testing import JetServer
from jetserver.testing.nats_fuzz import FuzzReport, run_fuzz
from support.jet_server import start_server_process
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio

MESSAGES = 3000
STALL_P95_S = 0.1
"""95 % of canary acks within this. Not 99 %: the canary stream is fsynced, and one slow
fsync on the server's event loop (a shared disk; the fsync runner then sends fsyncs to
threads for 10 s) delays the few canaries in flight, about 1.5 % of them (a fresh-clone
CI run beside other work: p99 156 ms, median 1.0 ms, one fsync of 134 ms). A stall caused
by the fuzzed input recurs with it (hundreds of malformed messages per run) and moves the
bulk of the canaries, which this still catches; the long campaign (nox -s fuzz_nats)
reports the p99 against 100 ms."""
STALL_MAX_S = 1.0
"""Every canary ack within this: the stall of issue 31 was 8 s; a shared CI machine may
pause a process for a few hundred ms, which the long campaign reports against 100 ms. A
canary that waited within 1 s of a slow fsync on the server's event loop waited for the
disk and is reported, not counted (``FuzzReport.ingest_stalls``)."""


@pytest.fixture
def jet_process(nats_server: NatsServer, tmp_path: Path) -> Iterator[JetServer]:
    server = start_server_process(nats_server.url, tmp_path / "data", "--log-level", "INFO")
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(120)
async def test_random_publishes_are_stored_once_and_stall_nothing(
    nats_server: NatsServer, jet_process: JetServer
) -> None:
    seed = int(os.environ.get("JET_FUZZ_SEED") or random.SystemRandom().randrange(1 << 31))
    report = await run_fuzz(
        nats_server.url,
        jet_process.address,
        messages=MESSAGES,
        seed=seed,
        round_size=1000,
        read_back_timeout_s=20.0,
        server_log=jet_process.log_path,
    )
    text = "\n".join(report.lines(STALL_MAX_S))
    assert report.ok(STALL_MAX_S), f"JET_FUZZ_SEED={seed}\n{text}"
    lat = sorted(report.canary_latencies)
    assert lat[int(len(lat) * 0.95)] <= STALL_P95_S, f"JET_FUZZ_SEED={seed}\n{text}"
    assert report.kinds.get("hpub-malformed", 0) > 100, text
    problems = report.server_log_problems
    assert problems["nats disconnected"] == problems["nats protocol error"] == 0, text
    assert problems["handling failed"] == problems["tracebacks"] == 0, text
    assert jet_process.alive


def test_a_canary_that_waited_for_the_disk_is_reported_not_counted() -> None:
    """A slow canary answer within 1 s of a slow fsync on the server's event loop is the
    disk's (reported), one far from any is the ingest's (fails the run)."""
    report = FuzzReport(seed=1, sent=2, to_streams=0, canary_sent=2, canary_answered=2)
    report.still_serving = True
    report.canary_started = [100.0, 200.0]
    report.canary_latencies = [0.001, 1.8]
    report.slow_fsyncs = [(201.9, 1.84)]  # logged as it ended, inside the slow answer
    assert report.stalls(STALL_MAX_S) == 1
    assert report.ingest_stalls(STALL_MAX_S) == 0
    assert report.ok(STALL_MAX_S)
    assert "of which 1 within 1 s of a slow fsync" in "\n".join(report.lines(STALL_MAX_S))
    report.slow_fsyncs = [(150.0, 1.84)]  # another time: the ingest's stall
    assert report.ingest_stalls(STALL_MAX_S) == 1
    assert not report.ok(STALL_MAX_S)
