"""The async producer's compression off the event loop, in send order (opt-in).

Compressing a 16 KiB JSON-like value with zstd takes about 30-50 µs of CPU; done in
:meth:`~jetsdk.producer.producer.Producer.send_soon` it runs on the event loop, one value
after the other with the loop's own work (batching, writing requests, reading acks). Both
``zstandard`` and ``lz4`` release the GIL while they compress, so a
:class:`CompressionStage` can take the values of at least the producer's
``compression_offload_bytes`` and compress them in a worker thread (``anyio.to_thread``,
one batch of values per call, one call at a time), while the loop goes on; they enter the
accumulator in the order they were sent. zstd compresses the batch in one call into the
library (:meth:`~jetsdk.codec.compression.ValueCompressor.compress_many`), which releases
the GIL once for the batch: compressing value by value, the thread released it and waited
to take it back after every value, behind the loop's thread. Every message sent while the
stage holds any goes through it too, its value compressed there: a short one does not
overtake a long one of the same partition, and the
:class:`~jetsdk.codec.compression.ValueCompressor` (whose skipping after incompressible
values depends on their order) sees the values in send order, from one thread at a time.

The stage is on by default for values of DEFAULT_OFFLOAD_BYTES and more
(``compression_offload_bytes=None``: off, every value compressed on the loop). Compressing
value by value in the thread, it once measured slower than the loop on a 2-core machine with
the server beside the producer (bench sizes, quiet, 16 KiB, medians of 3 alternating pairs:
JSON-like zstd 166 vs 187 MiB/s, lz4 234.5 vs 247.4), and was turned off; with zstd's
batches (one library call a batch) it is the faster one: bench sizes at 16 KiB (quiet, 5
alternating rounds, load 1.3-1.6) JSON-like zstd 179.3 MiB/s (1.60x JetStream with s2) in
the thread against 153.1 (1.47x) on the loop, jet's CPU 7.9 against 8.7 ms/MiB; and
bench.profile_bytes (zstd, JSON-like 16 KiB, 3 alternating pairs, load 34-42) producer CPU
5.63 / 5.63 / 5.31 against 7.19 / 6.87 / 6.25 ms/MiB on the loop, faster in each pair; lz4
(not batched) 5.00 against 5.16 ms/MiB (medians, load 41-50), faster in each pair.
bench sizes' "zstd on the loop" row is the A/B.

A value whose compression fails in the thread (a codec error) is sent as it is, which the
message size limit allows (checked on the value as it is), and the failure logged.

The blocking producer (:mod:`jetsdk.sync.producer`) compresses on its caller's thread
already and does not use a stage.

Task safety: one event loop; :meth:`CompressionStage.run` is the producer's background
task; the ``compress`` function runs in one worker thread at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio
import anyio.to_thread

from jetsdk.codec.compression import COMPRESSION_HEADER, ValueCompressor
from jetsdk.codec.messages import ProduceMessage, new_produce_message
from jetsdk.errors import ClientClosed
from jetsdk.producer.checks import compressed, message_size
from jetsdk.producer.handle import SendHandle

__all__ = [
    "DEFAULT_OFFLOAD_BYTES",
    "MAX_STAGE_BATCH",
    "CompressionStage",
    "compressed_message",
    "compressed_messages",
]

DEFAULT_OFFLOAD_BYTES = 8 * 1024
"""The producer's default ``compression_offload_bytes``: values this long and longer are
compressed in the stage's worker thread (module docstring: measured faster than the loop)."""
MAX_STAGE_BATCH = 256
"""Most values one worker-thread call compresses: the first ones enter the accumulator
(and get sent) while later ones are still being compressed."""

T = TypeVar("T")
log = logging.getLogger("jetsdk.producer")


def compressed_message(
    compressor: ValueCompressor, message: ProduceMessage
) -> tuple[ProduceMessage, int] | None:
    """``message`` with its value compressed and the ``Jet-Compression`` header added, and
    the bytes it saves against the message size limit; None to send it as it is (the
    value did not get smaller by more than the header's length, or was skipped: see
    :class:`~jetsdk.codec.compression.ValueCompressor`). Never larger than ``message``, so
    a message within the limit stays within it. Pure: runs in the stage's thread."""
    value, key, headers = message.value, message.key, message.headers
    stored, hdrs = compressed(compressor, value, headers)
    if stored is value:
        return None
    saved = message_size(value, key, headers) - message_size(stored, key, hdrs)
    if saved <= 0:
        return None
    return new_produce_message(stored, key, hdrs, message.subject), saved


_CODEC_HEADER = COMPRESSION_HEADER.lower()


def compressed_messages(
    compressor: ValueCompressor, messages: list[ProduceMessage]
) -> list[tuple[ProduceMessage, int] | None]:
    """:func:`compressed_message` of each of ``messages``, in order, their values
    compressed in one :meth:`~jetsdk.codec.compression.ValueCompressor.compress_many`
    call (the GIL released once for the batch). A value whose compression fails makes
    each value go alone through :func:`compressed_message`, where a failing one is sent as
    it is (logged). Runs in the stage's thread."""
    todo = [
        i
        for i, message in enumerate(messages)
        if not any(name.lower() == _CODEC_HEADER for name, _ in message.headers)
    ]
    try:
        packed = compressor.compress_many([messages[i].value for i in todo])
    except Exception:
        log.warning("batch compression failed; compressing values one by one", exc_info=True)
        return [_one_or_none(compressor, message) for message in messages]
    out: list[tuple[ProduceMessage, int] | None] = [None] * len(messages)
    for i, stored in zip(todo, packed, strict=True):
        if stored is None:
            continue
        message = messages[i]
        value, key, headers = message.value, message.key, message.headers
        hdrs = (*headers, (COMPRESSION_HEADER, compressor.codec.encode()))
        saved = message_size(value, key, headers) - message_size(stored, key, hdrs)
        if saved > 0:
            out[i] = new_produce_message(stored, key, hdrs, message.subject), saved
    return out


def _one_or_none(
    compressor: ValueCompressor, message: ProduceMessage
) -> tuple[ProduceMessage, int] | None:
    try:
        return compressed_message(compressor, message)
    except Exception:  # the codec failed: send the value as it is
        log.warning("compression failed; the value is sent uncompressed", exc_info=True)
        return None


class CompressionStage(Generic[T]):
    """Holds messages from ``send_soon`` until their values are compressed (``compress``,
    a batch at a time in a worker thread) and hands them to ``append_all`` (the
    accumulator) in arrival order.

    Messages are counted in :attr:`held` until appended; the producer counts them against
    ``max_pending`` and :meth:`drained` before it flushes.
    """

    def __init__(
        self,
        compress: Callable[[list[T]], list[T]],
        append_all: Callable[[list[tuple[T, SendHandle]]], object],
        offloaded: Callable[[T], bool],
    ) -> None:
        """``compress``: the messages compressed (or as they are), in order, called in the
        worker thread; ``append_all``: queue messages for sending, in order (on the loop);
        ``offloaded``: whether a
        message is to be compressed here (else it only keeps its place in the order)."""
        self._compress = compress
        self._append_all = append_all
        self._offloaded = offloaded
        self._queue: list[tuple[T, SendHandle]] = []
        self._working: list[tuple[T, SendHandle]] = []
        self._wake = anyio.Event()
        self._idle: anyio.Event | None = None
        self._closed = False

    @property
    def held(self) -> int:
        """Messages queued here or being compressed, not yet appended."""
        return len(self._queue) + len(self._working)

    def submit(self, item: T, handle: SendHandle) -> bool:
        """Queue a message (on the loop); :meth:`run` appends it after those before it.
        True if that made a full batch for the worker (the caller should let :meth:`run`
        take it: a checkpoint)."""
        queue = self._queue
        queue.append((item, handle))
        self._wake.set()
        return len(queue) % MAX_STAGE_BATCH == 0

    async def drained(self) -> None:
        """Wait until every message submitted before the call is appended (or the stage
        closed)."""
        while self.held and not self._closed:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def close(self) -> None:
        """Fail the messages still held (the producer closes); :meth:`run` appends no more."""
        self._closed = True
        held, self._queue, self._working = self._queue + self._working, [], []
        closed = ClientClosed("the producer was closed before the message was sent")
        for _, handle in held:
            if not handle.done():
                handle._set(None, closed)
        if self._idle is not None:
            self._idle.set()

    async def run(self) -> None:
        """The background task: compress and append, batch by batch, until cancelled."""
        while not self._closed:
            await self._wake.wait()
            self._wake = anyio.Event()
            while self._queue and not self._closed:
                self._working = batch = self._queue[:MAX_STAGE_BATCH]
                del self._queue[:MAX_STAGE_BATCH]
                if any(self._offloaded(item) for item, _ in batch):
                    done = await anyio.to_thread.run_sync(self._compress_all, batch)
                    if self._working is not batch:  # close() failed them meanwhile
                        return
                else:
                    done = batch
                self._working = []
                self._append_all(done)
            idle = self._idle
            if idle is not None and not self.held:
                self._idle = None
                idle.set()

    def _compress_all(self, batch: list[tuple[T, SendHandle]]) -> list[tuple[T, SendHandle]]:
        offloaded = self._offloaded
        picked = [item for item, _ in batch if offloaded(item)]
        try:
            done = self._compress(picked)
        except Exception:  # the codec failed: send the values as they are
            log.warning("compression failed; the values are sent uncompressed", exc_info=True)
            done = picked
        compressed = iter(done)
        return [(next(compressed) if offloaded(item) else item, handle) for item, handle in batch]
