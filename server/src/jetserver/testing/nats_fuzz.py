"""The NATS ingest fuzzer: random publishes from raw sockets against live servers (issue 31).

:func:`run_fuzz` takes a running nats-server and a jet server (its own process), creates
``streams`` one-partition streams (subjects ``fz.s<i>``) and a canary stream, and runs
rounds: ``publishers`` raw TCP connections each write their share of the round's messages
(:mod:`jetserver.testing.nats_fuzz_gen`: ``PUB``/``HPUB`` with odd framing, header blocks
well-formed, odd, huge or malformed, payloads of any bytes and size), cut into writes of
random sizes, then confirm with ``PING``/``PONG`` that nats-server took everything. After
each round every stream is read back through the SDK (Fetch): each message sent to a
stream's subject must be stored exactly once, with the value and headers
spec/envelope.md says, in each publisher's order. Meanwhile a canary thread sends a
request to the canary stream every ``canary_interval_s`` on its own socket and times the
ack: a stopped read loop shows as a long wait. Publishers keep to ``rate`` messages per
second together, so that the canary does not just wait behind a backlog the fuzzer built
(``rate`` 0: as fast as they can). :class:`FuzzReport` counts everything.

Rounds bound what is in flight (one round) and what the fuzzer holds in memory. The run
stops after the first round that lost, duplicated or added a record.
"""

from __future__ import annotations

import datetime
import random
import socket
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import attrs

from jetsdk import Client
from jetsdk.codec.record import iter_records
from jetserver.natsproto import Message, NatsReader, Ping
from jetserver.testing.nats_fuzz_gen import FuzzMessage, MessageMaker, payload_id

STALL_BOUND_S = 0.1
"""A canary ack slower than this is a stall."""
READ_BACK_TIMEOUT_S = 120.0
"""How long a round waits for its messages to be stored."""
CANARY_TIMEOUT_S = 10.0
"""A canary request unanswered after this is counted unanswered."""
DEFAULT_RATE = 2000.0
"""Messages per second, all publishers together: below what a jet server stores on a
small machine, so the canary measures stalls rather than a queue the fuzzer built."""
_FETCH_BYTES = 8 * 1024 * 1024
_MAX_WRITE = 64 * 1024


@attrs.define
class FuzzReport:
    """What a fuzz run sent, what was stored, and how the canary fared."""

    seed: int
    sent: int = 0
    to_streams: int = 0
    refused: int = 0
    """Messages to a stream over its limits (which it must not store)."""
    kinds: dict[str, int] = attrs.field(factory=dict)
    bytes_sent: int = 0
    stored_once: int = 0
    missing: int = 0
    duplicated: int = 0
    unexpected: int = 0
    wrong_content: int = 0
    out_of_order: int = 0
    canary_sent: int = 0
    canary_answered: int = 0
    canary_latencies: list[float] = attrs.field(factory=list)
    canary_started: list[float] = attrs.field(factory=list)
    """Wall-clock time (s since the epoch) each answered canary request was sent."""
    slow_fsyncs: list[tuple[float, float]] = attrs.field(factory=list)
    """``(wall time, seconds)`` of each fsync the server's log reports as slow on its
    event loop (the loop waited for the disk: a stall that is not the ingest's)."""
    seconds: float = 0.0
    server_log_problems: dict[str, int] = attrs.field(factory=dict)
    still_serving: bool = False
    examples: list[str] = attrs.field(factory=list)
    """The first few failures, for the report."""

    def stalls(self, bound_s: float = STALL_BOUND_S) -> int:
        """Canary requests answered slower than ``bound_s`` or not at all."""
        slow = sum(1 for lat in self.canary_latencies if lat > bound_s)
        return slow + (self.canary_sent - self.canary_answered)

    def ingest_stalls(self, bound_s: float = STALL_BOUND_S) -> int:
        """:meth:`stalls` less the slow canary answers within 1 s of a slow fsync on the
        server's event loop: those waited for the disk, not for the ingest of what the
        fuzzer sent (a fresh-clone CI run: one fsync of 1.84 s on a disk the suite's
        other tests shared, one canary answer of 1.83 s in it)."""
        slow = sum(
            1
            for t, x in zip(self.canary_started, self.canary_latencies, strict=True)
            if x > bound_s and not self._near_slow_fsync(t, x)
        )
        return slow + (self.canary_sent - self.canary_answered)

    def _near_slow_fsync(self, started: float, took: float) -> bool:
        """True if a slow fsync on the event loop ended within 1 s of a canary request
        sent at ``started`` that took ``took`` seconds."""
        return any(started - 1.0 <= f <= started + took + 1.0 for f, _s in self.slow_fsyncs)

    def ok(self, bound_s: float = STALL_BOUND_S) -> bool:
        """True if every message to a stream was stored once, intact, in order, nothing
        else was stored, the canary never waited over ``bound_s`` but for the disk (a slow
        fsync on the server's event loop, :meth:`ingest_stalls`), and the server serves."""
        return (
            self.stored_once == self.to_streams - self.refused
            and not (self.missing or self.duplicated or self.unexpected)
            and not (self.wrong_content or self.out_of_order)
            and self.ingest_stalls(bound_s) == 0
            and self.still_serving
        )

    def note(self, text: str) -> None:
        if len(self.examples) < 10:
            self.examples.append(text)

    def lines(self, bound_s: float = STALL_BOUND_S) -> list[str]:
        """The printed report."""
        lat = sorted(self.canary_latencies)
        rate = self.sent / self.seconds if self.seconds else 0.0

        def ms(x: float) -> str:
            return f"{x * 1000:.1f} ms"

        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items()))
        out = [
            f"NATS ingest fuzz, seed {self.seed}: {self.sent} messages in {self.seconds:.1f} s "
            f"({rate:.0f}/s), {self.bytes_sent / 1e6:.1f} MB",
            f"  sent: {self.to_streams} to stream subjects, {self.sent - self.to_streams} to "
            f"noise subjects; {kinds}",
            f"  stored: {self.stored_once} of {self.to_streams - self.refused} exactly once "
            f"({self.refused} over the record limits, refused as they must be); missing "
            f"{self.missing}, duplicated {self.duplicated}, unexpected {self.unexpected}, "
            f"wrong content {self.wrong_content}, out of order {self.out_of_order}",
        ]
        if lat:
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            out.append(
                f"  canary: {self.canary_answered} of {self.canary_sent} answered; latency "
                f"median {ms(statistics.median(lat))}, p99 {ms(p99)}, max {ms(lat[-1])}; "
                f"over {ms(bound_s)}: {self.stalls(bound_s)}"
            )
        else:
            out.append(f"  canary: {self.canary_answered} of {self.canary_sent} answered")
        slow = [
            (t, x)
            for t, x in zip(self.canary_started, self.canary_latencies, strict=True)
            if x > bound_s
        ]
        if slow:
            near = sum(1 for t, x in slow if self._near_slow_fsync(t, x))
            worst = ", ".join(
                f"{time.strftime('%H:%M:%S', time.gmtime(t))} {ms(x)}"
                for t, x in sorted(slow, key=lambda s: -s[1])[:5]
            )
            out.append(
                f"  canary acks over {ms(bound_s)}: {len(slow)}, of which {near} within 1 s of "
                f"a slow fsync on the server's event loop; worst (UTC): {worst}"
            )
        if self.slow_fsyncs:
            longest = max(took for _t, took in self.slow_fsyncs)
            out.append(
                f"  slow fsyncs on the server's event loop: {len(self.slow_fsyncs)}, "
                f"longest {ms(longest)}"
            )
        problems = ", ".join(f"{k} {v}" for k, v in self.server_log_problems.items())
        out.append(f"  server: still serving {self.still_serving}; log: {problems or 'clean'}")
        out.extend(f"  example: {e}" for e in self.examples)
        out.append(f"  RESULT: {'PASS' if self.ok(bound_s) else 'FAIL'}")
        return out


_LOG_PROBLEMS = {
    "nats disconnected": b"nats disconnected",
    "nats protocol error": b"nats protocol error",
    "handling failed": b"nats message handling failed",
    "malformed header warnings": b"malformed header block",
    "tracebacks": b"Traceback",
}


def slow_fsyncs(path: Path) -> list[tuple[float, float]]:
    """``(wall time, seconds)`` of the server log's "slow fsync on the event loop" lines."""
    out: list[tuple[float, float]] = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return out
    for line in lines:
        if b"slow fsync on the event loop" not in line:
            continue
        stamp, _sep, rest = line.partition(b" ")
        took = rest.rpartition(b"took_ms=")[2].split(b" ")[0]
        try:
            when = datetime.datetime.fromisoformat(stamp.decode().replace("Z", "+00:00"))
            out.append((when.timestamp(), float(took) / 1000))
        except ValueError:
            continue
    return out


def scan_server_log(path: Path) -> dict[str, int]:
    """How often the server log mentions each known problem (and the malformed-header
    warning, which is expected, at most once per 10 s)."""
    try:
        text = path.read_bytes()
    except OSError:
        return {"log unreadable": 1}
    return {name: text.count(needle) for name, needle in _LOG_PROBLEMS.items()}


class Canary(threading.Thread):
    """Sends a request to ``subject`` every ``interval_s`` over its own raw socket and
    times each ack (a thread, so the fuzzer's event loop does not delay it)."""

    def __init__(self, host: str, port: int, subject: str, interval_s: float) -> None:
        super().__init__(name="nats-fuzz-canary", daemon=True)
        self.host, self.port, self.subject, self.interval_s = host, port, subject, interval_s
        self.stop_event = threading.Event()
        self.sent = 0
        self.latencies: list[float] = []
        self.started: list[float] = []
        """Wall time each answered request was sent."""
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the fuzzer
            self.error = exc

    def _run(self) -> None:
        reader = NatsReader()
        with socket.create_connection((self.host, self.port), timeout=CANARY_TIMEOUT_S) as sock:
            sock.sendall(
                b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
                b"SUB fz.canary.inbox.* 1\r\n"
            )
            while not self.stop_event.wait(self.interval_s):
                n = self.sent
                self.sent += 1
                body = b"canary %d" % n
                started = time.monotonic()
                wall = time.time()
                sock.sendall(
                    b"PUB %b fz.canary.inbox.%d %d\r\n%b\r\n"
                    % (self.subject.encode(), n, len(body), body)
                )
                want = b"fz.canary.inbox.%d" % n
                if self._await_reply(sock, reader, want, started):
                    self.latencies.append(time.monotonic() - started)
                    self.started.append(wall)

    def _await_reply(
        self, sock: socket.socket, reader: NatsReader, want: bytes, started: float
    ) -> bool:
        while time.monotonic() - started < CANARY_TIMEOUT_S:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                return False
            if not data:
                raise ConnectionError("nats-server closed the canary's connection")
            for event in reader.feed(data):
                if type(event) is tuple and event[0] == want:
                    return True
                if isinstance(event, Message) and event.subject == want:
                    return True
                if isinstance(event, Ping):
                    sock.sendall(b"PONG\r\n")
        return False


async def _publish(
    host: str,
    port: int,
    messages: Sequence[FuzzMessage],
    rng: random.Random,
    rate: float,
) -> None:
    """Write ``messages`` on a new raw connection, ``rate`` per second at most (0: as fast
    as possible), in groups cut into writes of random sizes, then wait for nats-server's
    PONG (it took everything) and check it reported no error."""
    async with await anyio.connect_tcp(host, port) as sock:
        await sock.send(
            b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"echo":false}\r\n'
        )
        started = time.monotonic()
        done = 0
        while done < len(messages):
            group = messages[done : done + rng.randrange(1, 64)]
            data = b"".join(m.wire for m in group)
            pos = 0
            while pos < len(data):
                size = rng.choice((rng.randrange(1, 16), rng.randrange(16, _MAX_WRITE), _MAX_WRITE))
                await sock.send(data[pos : pos + size])
                pos += size
            done += len(group)
            if rate > 0:
                ahead = started + done / rate - time.monotonic()
                if ahead > 0:
                    await anyio.sleep(ahead)
        await sock.send(b"PING\r\n")
        got = b""
        with anyio.fail_after(60):
            while b"PONG\r\n" not in got:
                got += await sock.receive()
        if b"-ERR" in got:
            raise RuntimeError(f"nats-server refused a fuzz publish: {got[:200]!r}")


async def _read_back(
    client: Client, stream: str, start: int, count: int, deadline: float
) -> list[tuple[int, bytes, tuple[tuple[str, bytes], ...]]]:
    """Records ``start`` .. ``start + count`` of ``stream`` (fewer if they do not come
    before ``deadline``), as ``(offset, value, headers)``."""
    out: list[tuple[int, bytes, tuple[tuple[str, bytes], ...]]] = []
    offset = start
    while len(out) < count and time.monotonic() < deadline:
        wait = max(0.0, min(1.0, deadline - time.monotonic()))
        _header, raw = await client.fetch(stream, 0, offset, max_bytes=_FETCH_BYTES, max_wait=wait)
        for record in iter_records(raw):
            out.append((record.offset, bytes(record.value), tuple(record.headers)))
        if out:
            offset = out[-1][0] + 1
    return out


def _check_stream(
    report: FuzzReport,
    stream: str,
    expected: list[FuzzMessage],
    got: list[tuple[int, bytes, tuple[tuple[str, bytes], ...]]],
) -> None:
    """Compares one stream's records of a round with what was sent to it."""
    wanted = {(m.publisher, m.seq): m for m in expected if m.stored}
    refused = {(m.publisher, m.seq) for m in expected if not m.stored}
    seen: set[tuple[int, int]] = set()
    last_seq: dict[int, int] = {}
    for offset, value, headers in got:
        key = payload_id(value)
        message = wanted.get(key) if key is not None else None
        if key in refused:
            report.unexpected += 1
            report.note(f"{stream}@{offset}: fz{key[0]}.{key[1]} stored, over the limits")
            continue
        if key is None or message is None:
            report.unexpected += 1
            report.note(f"{stream}@{offset}: a record nobody sent here ({value[:24]!r})")
            continue
        if key in seen:
            report.duplicated += 1
            report.note(f"{stream}@{offset}: fz{key[0]}.{key[1]} stored twice")
            continue
        seen.add(key)
        if value != message.value or headers != message.headers:
            report.wrong_content += 1
            report.note(
                f"{stream}@{offset}: fz{key[0]}.{key[1]} ({message.kind}) stored as "
                f"headers {headers[:3]!r}, want {message.headers[:3]!r}"
            )
        else:
            report.stored_once += 1
        if last_seq.get(key[0], -1) > key[1]:
            report.out_of_order += 1
        last_seq[key[0]] = key[1]
    for key in wanted.keys() - seen:
        report.missing += 1
        report.note(f"{stream}: fz{key[0]}.{key[1]} ({wanted[key].kind}) not stored")


async def run_fuzz(
    nats_url: str,
    jet_address: str,
    *,
    messages: int,
    seed: int,
    streams: int = 4,
    publishers: int = 4,
    round_size: int = 4000,
    canary_interval_s: float = 0.02,
    rate: float = DEFAULT_RATE,
    read_back_timeout_s: float = READ_BACK_TIMEOUT_S,
    server_log: Path | None = None,
    progress: bool = False,
) -> FuzzReport:
    """Run the fuzzer (see the module docstring) and return its report.

    Raises:
        RuntimeError: nats-server refused a publish (a fuzzer bug), or the canary failed.
    """
    host, port_text = nats_url.removeprefix("nats://").rsplit(":", 1)
    port = int(port_text)
    rng = random.Random(seed)
    report = FuzzReport(seed=seed)
    names = [f"fz{i}" for i in range(streams)]
    subjects = [f"fz.s{i}" for i in range(streams)]
    makers = [MessageMaker(p, subjects, random.Random(rng.random())) for p in range(publishers)]
    bases = [0] * streams
    started = time.monotonic()
    async with Client([jet_address]) as client:
        for name, subject in zip(names, subjects, strict=True):
            await client.create_stream(name, subject)
        await client.create_stream("fzcanary", "fz.canary")
        canary = Canary(host, port, "fz.canary", canary_interval_s)
        canary.start()
        try:
            while report.sent < messages:
                size = min(round_size, messages - report.sent)
                batches = [[m.next() for _ in range(size // publishers)] for m in makers]
                batches[0].extend(makers[0].next() for _ in range(size % publishers))
                async with anyio.create_task_group() as tg:
                    for batch in batches:
                        tg.start_soon(
                            _publish,
                            host,
                            port,
                            batch,
                            random.Random(rng.random()),
                            rate / publishers,
                        )
                sent = [m for batch in batches for m in batch]
                report.sent += len(sent)
                report.bytes_sent += sum(len(m.wire) for m in sent)
                for m in sent:
                    report.kinds[m.kind] = report.kinds.get(m.kind, 0) + 1
                deadline = time.monotonic() + read_back_timeout_s
                for i, name in enumerate(names):
                    expected = [m for m in sent if m.stream == i]
                    report.to_streams += len(expected)
                    refused = sum(1 for m in expected if not m.stored)
                    report.refused += refused
                    count = len(expected) - refused
                    got = await _read_back(client, name, bases[i], count, deadline)
                    _check_stream(report, name, expected, got)
                    bases[i] += len(got)
                if canary.error is not None:
                    raise RuntimeError(f"the canary failed: {canary.error!r}")
                if progress:
                    print(f"  {report.sent} sent, {report.stored_once} stored once", flush=True)
                if report.missing or report.duplicated or report.unexpected:
                    break  # the next rounds would only repeat it; report now
            # Anything stored late (a duplicate) shows past the bases.
            await anyio.sleep(1.0)
            for i, name in enumerate(names):
                extra = await _read_back(client, name, bases[i], 1 << 30, time.monotonic() + 1)
                for offset, value, _headers in extra:
                    report.unexpected += 1
                    report.note(f"{name}@{offset}: stored after its round ({value[:24]!r})")
            info = await client.describe_stream("fzcanary")
            report.still_serving = info.name == "fzcanary"
        finally:
            canary.stop_event.set()
            canary.join(timeout=CANARY_TIMEOUT_S + 1)
    report.canary_sent = canary.sent
    report.canary_latencies = canary.latencies
    report.canary_started = canary.started
    report.canary_answered = len(canary.latencies)
    report.seconds = time.monotonic() - started
    if server_log is not None:
        report.server_log_problems = scan_server_log(server_log)
        report.slow_fsyncs = slow_fsyncs(server_log)
    return report
