"""Drivers for the fault tests: an acked producer, a consumer, an HW monitor, log readers.

* :class:`ProducerDriver` sends ``<tag>-<counter>|...`` payloads with the SDK (ack ALL,
  idempotent producer), round-robin over the partitions, paced, bounded in count and time,
  and records every acknowledged (partition, offset, payload id) and every failure.
* :class:`ConsumerDriver` reads every partition from the earliest offset with the SDK
  Consumer and records what it got.
* :class:`HwMonitor` polls DescribeStream on every live server (its own view) and records
  every HW it reports.
* :func:`read_committed` fetches a partition up to the HW through the partition leader
  (:func:`cluster.records.read_disk_log` reads a replica's segment files).

All bounded: every loop has a count and a deadline, every request a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio
import attrs

from cluster.checkers import Acked, HwSample, Stored, payload_id_of
from cluster.harness import Cluster
from cluster.records import stored_from_raw
from cluster.views import KeptViews
from jetsdk import AckPolicy, Client, Consumer, JetError, Producer, RetryPolicy
from jetsdk.producer import SendHandle

PATIENT_RETRY = RetryPolicy(attempts=60, backoff=0.05, backoff_max=0.25)
"""Client retries that ride out a failover (about 15 s)."""
REQUEST_TIMEOUT_S = 5.0
"""Client request timeout: a paused server must not hold a request for long."""
ACK_TIMEOUT_S = 8.0
"""Server-side bound on waiting for ALL acks: twice the test clusters' replica_lag_max_s
(4 s, tests/cluster/harness.py; the tests that set their own set less), so that a send
waits out an ISR shrink instead of being sent again. A send held by a leader that was cut
off from its followers is answered TIMEOUT after this long and sent again to the new
leader (retriable; the producer is idempotent): the partition tests' acks resumed this
long after the cut, 15.2 s with 15 s before (test_faults_partition, one-way-to-leader and
leader-isolated, 4 runs each, load 14-19), 8.1-8.5 s with 8 s."""
DELIVERY_TIMEOUT_S = 60.0
"""The producer retries a failed send (leader change, lost connection) for this long."""
FLUSH_BOUND_S = 30.0
"""Bound on waiting for the outcomes of what was sent, once sending stops."""
MAX_READ_REQUESTS = 100_000
"""Bound on the Fetch requests of one read."""


def client(servers: Sequence[str]) -> Client:
    """An SDK client with patient retries and short timeouts (enter it with async with)."""
    return Client(
        list(servers),
        retry=PATIENT_RETRY,
        request_timeout=REQUEST_TIMEOUT_S,
        connect_timeout=2.0,
    )


async def read_committed(
    jet: Client, stream: str, partition: int, *, start: int = 0
) -> tuple[list[Stored], int]:
    """Every committed record of a partition through its leader; also the HW reached."""
    out: list[Stored] = []
    offset = start
    hw = start
    for _ in range(MAX_READ_REQUESTS):
        header, records = await jet.fetch(stream, partition, offset, max_bytes=1 << 20, max_wait=0)
        got = stored_from_raw(partition, records)
        out.extend(got)
        hw = header.hw
        if got:
            offset = got[-1].offset + 1
        if offset >= hw or not got:
            return out, hw
    raise AssertionError(f"read of {stream}/{partition} did not finish")


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


@attrs.define(eq=False)
class ProducerDriver:
    """Sends paced, numbered payloads with ack ALL and an idempotent producer."""

    jet: Client
    """An entered SDK client."""
    stream: str
    """Target stream."""
    partitions: int
    """Partitions (messages go round-robin, explicitly)."""
    tag: str = "m"
    """Payload id prefix (``<tag>-<counter>``)."""
    value_bytes: int = 100
    """Value size (the id is padded with dots)."""
    ack_timeout_s: float = ACK_TIMEOUT_S
    """The producer's ``ack_timeout`` (:data:`ACK_TIMEOUT_S`)."""
    acked: list[Acked] = attrs.field(factory=list)
    """Every acknowledged message, in ack order."""
    failures: dict[str, int] = attrs.field(factory=dict)
    """Failed sends by error class name."""
    sent: int = 0
    """Messages handed to the producer."""
    last_failure: str = ""
    """The last failure's message."""
    retries: int = 0
    """Produce requests the SDK producer sent again (leader changes, lost connections)."""
    _changed: anyio.Event = attrs.field(factory=anyio.Event)

    def value(self, counter: int) -> bytes:
        """The payload of message ``counter``."""
        head = f"{self.tag}-{counter:08d}|".encode()
        return head + b"." * max(0, self.value_bytes - len(head))

    @property
    def resolved(self) -> int:
        """Messages acknowledged or failed."""
        return len(self.acked) + sum(self.failures.values())

    def _done(self, partition: int, counter: int) -> Callable[[SendHandle], None]:
        payload_id = f"{self.tag}-{counter:08d}"

        def callback(handle: SendHandle) -> None:
            try:
                ack = handle.result()
            except JetError as exc:
                name = type(exc).__name__
                self.failures[name] = self.failures.get(name, 0) + 1
                self.last_failure = f"{payload_id}: {exc}"
            else:
                self.acked.append(Acked(partition, ack.offset, payload_id, time.monotonic()))
            self._changed.set()
            self._changed = anyio.Event()

        return callback

    async def run(
        self,
        count: int,
        time_limit_s: float,
        *,
        rate: float = 1000.0,
        window: int = 200,
        stop: anyio.Event | None = None,
    ) -> None:
        """Send up to ``count`` messages at about ``rate`` per second for at most
        ``time_limit_s`` (or until ``stop``), then wait (bounded) for every outcome."""
        deadline = time.monotonic() + time_limit_s
        with anyio.CancelScope(
            deadline=anyio.current_time() + time_limit_s + FLUSH_BOUND_S
        ) as outer:
            async with Producer(
                self.jet,
                self.stream,
                ack=AckPolicy.ALL,
                idempotent=True,
                linger=0.002,
                max_pending=window,
                ack_timeout=self.ack_timeout_s,
                delivery_timeout=DELIVERY_TIMEOUT_S,
            ) as producer:
                async with anyio.create_task_group() as tg:
                    sending = anyio.CancelScope()
                    if stop is not None:
                        tg.start_soon(_cancel_on, stop, sending)
                    with sending:
                        await self._send_loop(producer, count, deadline, rate, stop)
                    tg.cancel_scope.cancel()
                # Leaving the block flushes: every outcome, within FLUSH_BOUND_S.
                outer.deadline = min(outer.deadline, anyio.current_time() + FLUSH_BOUND_S)
            self.retries = producer.retries

    async def _send_loop(
        self,
        producer: Producer,
        count: int,
        deadline: float,
        rate: float,
        stop: anyio.Event | None,
    ) -> None:
        started = time.monotonic()
        for _ in range(count):
            now = time.monotonic()
            if now > deadline or (stop is not None and stop.is_set()):
                return
            ahead = self.sent / rate - (now - started)
            if ahead > 0:
                await anyio.sleep(min(ahead, 0.05))
            counter = self.sent
            partition = counter % self.partitions
            handle = await producer.send_soon(self.value(counter), partition=partition)
            handle.add_done_callback(self._done(partition, counter))
            self.sent += 1

    async def wait_acked(self, count: int, timeout_s: float) -> None:
        """Wait until ``count`` messages are acknowledged.

        Raises:
            AssertionError: not within ``timeout_s`` (failures are reported).
        """
        with anyio.move_on_after(timeout_s):
            while len(self.acked) < count:
                await self._changed.wait()
            return
        raise AssertionError(
            f"only {len(self.acked)}/{count} acked in {timeout_s} s; failures {self.failures} "
            f"(last: {self.last_failure})"
        )


@attrs.define(eq=False)
class ConsumerDriver:
    """Reads every partition from the earliest offset; records every message it gets."""

    jet: Client
    """An entered SDK client."""
    stream: str
    """Stream to read."""
    consumed: list[Stored] = attrs.field(factory=list)
    """Messages in the order received."""
    error: str = ""
    """The error that stopped it, if any."""

    async def run(self, stop: anyio.Event, time_limit_s: float) -> None:
        """Consume until ``stop`` is set or ``time_limit_s`` passes (reset="raise": an
        out-of-range position is an error, not a silent rewind)."""
        with anyio.move_on_after(time_limit_s):
            try:
                async with Consumer(
                    self.jet, self.stream, start="earliest", reset="raise", max_wait=0.2
                ) as consumer:
                    while not stop.is_set():
                        for msg in await consumer.fetch(max_records=1000, timeout=0.2):
                            r = msg.record
                            self.consumed.append(
                                Stored(
                                    msg.partition,
                                    r.offset,
                                    payload_id_of(r.value),
                                    r.producer_id,
                                    r.producer_seq,
                                    r.leader_epoch,
                                    b"",
                                )
                            )
            except JetError as exc:
                self.error = f"{type(exc).__name__}: {exc}"

    def reached(self, partition: int) -> int:
        """The next offset the consumer expects in ``partition``."""
        offsets = [r.offset for r in self.consumed if r.partition == partition]
        return max(offsets) + 1 if offsets else 0


@attrs.define(eq=False)
class HwMonitor:
    """Polls every live server's DescribeStream and records the HW each one reports."""

    cluster: Cluster
    """The cluster to watch."""
    stream: str
    """The stream."""
    interval_s: float = 0.05
    """Pause between polling rounds."""
    samples: list[HwSample] = attrs.field(factory=list)
    """Every observation, in time order per server."""
    views: KeptViews = attrs.field(factory=KeptViews)
    """A kept connection per server (see :class:`KeptViews`)."""

    async def poll_once(self) -> None:
        """One DescribeStream per live server."""
        for s in self.cluster.live():
            incarnation = s.starts
            view = await self.views.view(s.address, self.stream)
            if view is None or s.starts != incarnation:
                continue
            now = time.monotonic()
            for p, info in sorted(view.items()):
                hw = info.get("hw")
                if isinstance(hw, int):
                    leo = info.get("leo")
                    self.samples.append(
                        HwSample(
                            s.server_id,
                            incarnation,
                            p,
                            hw,
                            leo if isinstance(leo, int) else None,
                            now,
                        )
                    )

    async def run(self, stop: anyio.Event, time_limit_s: float) -> None:
        """Poll until ``stop`` is set or ``time_limit_s`` passes."""
        deadline = time.monotonic() + time_limit_s
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                await self.poll_once()
                with anyio.move_on_after(self.interval_s):
                    await stop.wait()
        finally:
            await self.views.aclose()
