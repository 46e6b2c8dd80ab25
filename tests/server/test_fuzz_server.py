"""Fuzzing the server's request handling over real sockets.

A ``jet server`` process gets, one connection per example, a few request frames built by
hypothesis: valid requests of every API (good and bad field values), random JSON bodies,
random bodies, then byte-level mutations of the whole (flips, cuts, inserted bytes), sent
whole or in small chunks. After each example the client half-closes and reads until the
server closes; it checks that every byte the server sent is a well-formed response frame
and that no request failed with UNKNOWN (an unexpected exception in the server).

At the end the process must still run, answer a normal produce/fetch, and its resident
memory (``VmRSS`` from ``/proc/PID/status``) must not have grown by more than
``RSS_GROWTH_LIMIT_BYTES`` from after the warm-up.

Budget: ``JET_FUZZ_SERVER_EXAMPLES`` examples (default 200) within
``JET_FUZZ_SERVER_SECONDS`` (default 20; later examples are skipped); raise both to fuzz
longer, e.g. ``JET_FUZZ_SERVER_EXAMPLES=20000 JET_FUZZ_SERVER_SECONDS=1800 pytest
--timeout 0 -s tests/server/test_fuzz_server.py`` (pytest-timeout's 120 s per test would
otherwise stop it; ``-s`` shows the summary line). A run of 3000 examples (105 s) ended with
VmRSS 48.5 -> 53.0 MB.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.msg import Msg

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.fetch_messages import FetchRequest, decode_fetch_response, encode_fetch_request
from jetsdk.codec.frames import FLAG_RESPONSE, Api, Frame, FrameDecoder, encode_frame
from jetsdk.codec.limits import MAX_FRAME_BYTES
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    decode_error,
    decode_json,
    decode_produce_response,
    encode_json,
    encode_produce_request,
)
from jetserver.broker.nats_port import NatsUnavailable
from jetserver.config.server import NatsConfig
from jetserver.natslink.link import NatsLink
from jetserver.testing import JetServer
from support.jet_server import start_server_process
from support.nats_server import NatsServer
from support.raw_client import split_address

EXAMPLES = int(os.environ.get("JET_FUZZ_SERVER_EXAMPLES", "200"))
BUDGET_S = float(os.environ.get("JET_FUZZ_SERVER_SECONDS", "20"))
WARMUP_EXAMPLES = 30
EXAMPLE_BOUND_S = 20.0
"""Bound on one example: the server must answer and close within it after our half-close."""
RSS_GROWTH_LIMIT_BYTES = 64 * 1024 * 1024
"""Allowed VmRSS growth over the fuzzing run (allocator noise, caches; a leak per request
would exceed it over a long run)."""
STREAM = "f"
NORMAL_ATTEMPTS = 10
SERVER_ENV = {
    "JET_LIMITS_MAX_FETCH_WAIT_MS": "50",
    "JET_LIMITS_MAX_PRODUCE_TIMEOUT_MS": "2000",
    "JET_LIMITS_READ_TIMEOUT_S": "2",
    "JET_LIMITS_MAX_FRAME_BYTES": str(1024 * 1024),
    "JET_LIMITS_MAX_MESSAGE_BYTES": "10000",
}

# ---------------------------------------------------------------------------- strategies


def raw_json(obj: object) -> bytes:
    """JSON text of ``obj`` by the stdlib encoder (integers of any size, lone surrogates
    escaped): bodies orjson would refuse to write but a peer can send."""
    return json.dumps(obj).encode()


u32 = st.integers(0, 2**32 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
small_int = st.integers(-2, 3)
stream_names = st.sampled_from([STREAM, "z0", "z1", "", "no such", "x" * 300]) | st.text(max_size=8)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=6,
)
KNOWN_KEYS = [
    "protocol",
    "client",
    "name",
    "subject",
    "partitions",
    "streams",
    "stream",
    "partition",
    "position",
    "timestamp_ns",
    "replication_factor",
    "group",
    "compact",
    "retention_max_bytes",
    "retention_max_age_s",
    "segment_max_bytes",
    "min_isr",
    "durability",
    "leader_epoch",
    "current_leader_epoch",
]
json_bodies = st.dictionaries(
    st.sampled_from(KNOWN_KEYS) | st.text(max_size=5), json_values, max_size=6
)


@st.composite
def create_bodies(draw: st.DrawFn) -> dict[str, object]:
    """CreateStream requests that may be valid: few names, at most 3 partitions (the
    server's memory must stay comparable before and after)."""
    body: dict[str, object] = {
        "name": draw(st.sampled_from(["z0", "z1", STREAM]) | st.text(max_size=4)),
        "subject": draw(st.sampled_from(["z0", "z1.*", "a.>", ""]) | st.text(max_size=4)),
    }
    if draw(st.booleans()):
        body["partitions"] = draw(small_int)
    extra = draw(st.dictionaries(st.sampled_from(KNOWN_KEYS[9:]), json_values, max_size=3))
    return {**extra, **body}


produce_messages = st.builds(
    ProduceMessage,
    value=st.binary(max_size=64) | st.just(b"v" * 12000),
    key=st.none() | st.binary(max_size=8),
    headers=st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=4)), max_size=2).map(tuple),
    subject=st.sampled_from(["", STREAM, "other"]),
)


@st.composite
def produce_bodies(draw: st.DrawFn) -> bytes:
    producer_id = draw(st.none() | st.integers(0, 2**64 - 1))
    req = ProduceRequest(
        stream=draw(stream_names.filter(lambda s: len(s.encode()) < 256)),
        partition=draw(st.integers(0, 2) | u32),
        ack_policy=draw(st.sampled_from(list(AckPolicy))),
        timeout_ms=draw(u32),
        messages=tuple(draw(st.lists(produce_messages, max_size=3))),
        producer_id=producer_id,
        base_seq=0 if producer_id is None else draw(st.integers(0, 2**64 - 1)),
    )
    return encode_produce_request(req)


@st.composite
def fetch_bodies(draw: st.DrawFn) -> bytes:
    replica_id = draw(st.sampled_from([-1, -1, -1, 0, 1, 5]) | st.integers(-(2**31), 2**31 - 1))
    replica = replica_id >= 0
    req = FetchRequest(
        stream=draw(stream_names.filter(lambda s: len(s.encode()) < 256)),
        partition=draw(st.integers(0, 2) | u32),
        offset=draw(st.integers(-2, 20) | i64),
        max_bytes=draw(u32),
        max_wait_ms=draw(st.integers(0, 20) | u32),
        replica_id=replica_id,
        replica_flushed=draw(i64) if replica else -1,
        leader_epoch=draw(st.integers(-1, 2) | i64) if replica else -1,
    )
    return encode_fetch_request(req)


JSON_APIS = [
    a for a in Api if a not in (Api.PRODUCE, Api.FETCH, Api.CREATE_STREAM, Api.REPLICA_FETCH)
]
frames_one = st.one_of(
    st.tuples(st.sampled_from(JSON_APIS), json_bodies.map(raw_json)),
    st.tuples(st.just(Api.CREATE_STREAM), create_bodies().map(raw_json)),
    st.tuples(
        st.just(Api.DELETE_STREAM),
        st.sampled_from(["z0", "z1"]).map(lambda n: encode_json({"name": n})),
    ),
    st.tuples(st.just(Api.PRODUCE), produce_bodies()),
    st.tuples(st.just(Api.FETCH), fetch_bodies()),
    st.tuples(st.integers(0, 255), st.binary(max_size=64)),
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """(bytes to send, chunk sizes to send them in)."""
    frames = draw(st.lists(frames_one, min_size=1, max_size=4))
    data = bytearray(b"".join(encode_frame(int(api), draw(u32), body) for api, body in frames))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "none", "none"]))
        if not data or kind == "none":
            continue
        i = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[i] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[i:]
        else:
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
    chunks = draw(st.none() | st.lists(st.integers(1, 16), min_size=1, max_size=8))
    return bytes(data), chunks or [len(data) or 1]


# ---------------------------------------------------------------------------- helpers


def rss_bytes(pid: int) -> int:
    """VmRSS of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def connect(address: str) -> socket.socket:
    host, port = split_address(address)
    sock = socket.create_connection((host, port), timeout=EXAMPLE_BOUND_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def exchange(address: str, data: bytes, chunks: list[int]) -> list[Frame]:
    """Send ``data`` in ``chunks`` (cycled), half-close, read every frame until the server
    closes (within EXAMPLE_BOUND_S)."""
    deadline = time.monotonic() + EXAMPLE_BOUND_S
    received = bytearray()
    with connect(address) as sock:
        pos, i = 0, 0
        try:
            while pos < len(data):
                size = chunks[i % len(chunks)]
                sock.sendall(data[pos : pos + size])
                pos += size
                i += 1
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server closed first (it refused the input): read what it sent
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                got = sock.recv(65536)
            except ConnectionResetError:
                break
            except TimeoutError:
                raise AssertionError(
                    f"server did not close within {EXAMPLE_BOUND_S} s after {data[:80]!r}"
                ) from None
            if not got:
                break
            received += got
    decoder = FrameDecoder(MAX_FRAME_BYTES)
    decoder.feed(bytes(received))
    out: list[Frame] = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame)
    assert decoder.buffered_bytes == 0, "the server sent a partial frame"
    return out


def check_response(frame: Frame) -> None:
    """A well-formed response; an error frame never says UNKNOWN (an unexpected failure)."""
    assert frame.flags & FLAG_RESPONSE, frame
    if frame.is_error:
        err = decode_error(frame.body)
        assert err.code != ErrorCode.UNKNOWN, err
    elif frame.api == Api.PRODUCE:
        decode_produce_response(frame.body)
    elif frame.api == Api.FETCH:
        decode_fetch_response(frame.body)
    else:
        decode_json(frame.body)


def request(
    sock: socket.socket, api: Api, body: bytes, cid: int, *, may_fail: bool = False
) -> Frame:
    sock.sendall(encode_frame(api, cid, body))
    decoder = FrameDecoder(MAX_FRAME_BYTES)
    while (frame := decoder.next_frame()) is None:
        got = sock.recv(65536)
        assert got, "server closed"
        decoder.feed(got)
    assert frame.correlation_id == cid
    assert may_fail or not frame.is_error, decode_error(frame.body)
    return frame


def normal_round(address: str, name: str) -> None:
    """Create ``name`` (if needed), produce one message with ack ALL, fetch it back."""
    with connect(address) as sock:
        body = encode_json({"name": name, "subject": name})
        frame = request(sock, Api.CREATE_STREAM, body, 1, may_fail=True)
        if frame.is_error:
            assert decode_error(frame.body).code == ErrorCode.STREAM_EXISTS
        req = ProduceRequest(name, 0, AckPolicy.ALL, 10_000, (ProduceMessage(b"ok"),))
        for attempt in range(NORMAL_ATTEMPTS):
            # TIMEOUT is retriable (as the SDK does): right after CreateStream the
            # partition's NATS subscription may not be active yet.
            frame = request(sock, Api.PRODUCE, encode_produce_request(req), 10 + attempt)
            (result,) = decode_produce_response(frame.body)
            if result.error_code != ErrorCode.TIMEOUT:
                break
        assert result.error_code == ErrorCode.NONE, result
        fetch = FetchRequest(name, 0, result.offset, 1 << 20, 0)
        frame = request(sock, Api.FETCH, encode_fetch_request(fetch), 3)
        header, records = decode_fetch_response(frame.body)
        assert header.hw > result.offset
        assert records


@pytest.fixture
def server(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[JetServer]:
    """A `jet server` process with short fetch/produce waits (stopped by PID)."""
    for key, value in SERVER_ENV.items():
        monkeypatch.setenv(key, value)
    proc = start_server_process(nats_server.url, tmp_path / "data", "--log-level", "INFO")
    try:
        yield proc
    finally:
        proc.stop()


# ---------------------------------------------------------------------------- the test


def test_fuzz_requests_over_sockets(server: JetServer) -> None:
    address, pid = server.address, server.proc.pid
    with connect(address) as sock:
        body = encode_json({"name": STREAM, "subject": STREAM, "partitions": 2})
        request(sock, Api.CREATE_STREAM, body, 1)
    started = time.monotonic()
    seen = {"examples": 0, "rss": 0}
    outcomes: dict[str, int] = {}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=cases())
    def one(case: tuple[bytes, list[int]]) -> None:
        if time.monotonic() - started > BUDGET_S:
            return
        data, chunks = case
        frames = exchange(address, data, chunks)
        for frame in frames:
            check_response(frame)
            code = decode_error(frame.body).name if frame.is_error else "ok"
            outcomes[code] = outcomes.get(code, 0) + 1
        seen["examples"] += 1
        if seen["examples"] == WARMUP_EXAMPLES:
            seen["rss"] = rss_bytes(pid)

    one()
    assert server.proc.poll() is None, "the server process died"
    normal_round(address, "after")
    assert seen["examples"] >= min(EXAMPLES, WARMUP_EXAMPLES), seen
    if seen["rss"]:
        growth = rss_bytes(pid) - seen["rss"]
        assert growth < RSS_GROWTH_LIMIT_BYTES, f"VmRSS grew by {growth} bytes"
    log = server.log_path.read_text(errors="replace")
    assert "request failed" not in log, log[-5000:]
    assert "nats: encountered error" not in log, log[-5000:]  # nats-py's read loop died
    print(
        f"fuzzed {seen['examples']} examples in {time.monotonic() - started:.1f} s; "
        f"VmRSS {seen['rss']} -> {rss_bytes(pid)}; responses {sorted(outcomes.items())}"
    )


def thread_states(pid: int) -> list[str]:
    """The state letter of every thread of ``pid`` (/proc/PID/task/*/stat)."""
    return [
        (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        for task in Path(f"/proc/{pid}/task").iterdir()
    ]


async def wait_stopped(pid: int) -> None:
    """Wait until every thread of ``pid`` is stopped (kill returns before they are)."""
    with anyio.fail_after(EXAMPLE_BOUND_S):
        while True:
            if all(state in "Tt" for state in thread_states(pid)):
                return
            await anyio.sleep(0.01)  # no event for another process's state: poll, bounded


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_flush_timeouts_do_not_break_the_nats_link(nats_server: NatsServer) -> None:
    """Regression (found by the fuzzer): nats-py's flush cancelled its PONG future on a
    timeout and the late PONG then killed its read loop, so the link stopped delivering.
    The nats-server is paused (SIGSTOP) so that the flushes time out for certain."""
    link = NatsLink(NatsConfig(servers=(nats_server.url,)))
    await link.connect(attempts=3)
    try:
        got = anyio.Event()

        async def handler(_msg: Msg) -> None:
            got.set()

        await link.subscribe("after.timeouts", handler)
        os.kill(nats_server.pid, signal.SIGSTOP)  # PONGs come only after SIGCONT
        try:
            await wait_stopped(nats_server.pid)
            for _ in range(3):
                with pytest.raises(NatsUnavailable):
                    await link.flush(0.05)
        finally:
            os.kill(nats_server.pid, signal.SIGCONT)
        await link.flush(EXAMPLE_BOUND_S)  # the late PONGs arrive before this one's
        await link.publish("after.timeouts", b"x")
        with anyio.fail_after(EXAMPLE_BOUND_S):
            await got.wait()
    finally:
        await link.close()
