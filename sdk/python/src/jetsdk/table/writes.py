"""A table's writes: one Produce message per call through the public
:meth:`jetsdk.Client.produce`, ack ALL, as an idempotent producer (so a retry after an
unknown outcome is answered DUPLICATE_SEQUENCE with the stored offset instead of being
stored twice or, for a compare-and-set, refused by its own success).

A compare-and-set carries ``Jet-Expected-Key-Offset`` (spec/envelope.md, "Per-key
compare-and-set"); the server refuses it with WRONG_EXPECTED_KEY_OFFSET naming the key's
current offset, raised here as :class:`~jetsdk.errors.WrongExpectedKeyOffset`.
"""

from __future__ import annotations

import secrets

import anyio
import attrs

from jetsdk.client import Client
from jetsdk.codec.error_codes import AckPolicy, ErrorCode, is_retriable
from jetsdk.codec.messages import ProduceMessage, ProduceRequest
from jetsdk.codec.ttl import TTL_HEADER
from jetsdk.errors import JetError, WrongExpectedKeyOffset, error_from_code
from jetsdk.partitioner import partition_for_key

EXPECTED_KEY_OFFSET = "Jet-Expected-Key-Offset"
"""The header of a per-key compare-and-set."""
ABSENT = -1
"""Expected revision meaning "the key has no live value" (create)."""
MAX_WRITE_ATTEMPTS = 200
"""Tries of one write whose result is retriable (TIMEOUT, NOT_LEADER, UNAVAILABLE while a
new leader rebuilds its key index from a long log...), :data:`RETRY_PAUSE_S` apart."""
RETRY_PAUSE_S = 0.1
"""Pause between such tries (a leader election takes a moment)."""


@attrs.define(eq=False)
class TableWriter:
    """Writes the keys of one stream (module docstring)."""

    client: Client
    stream: str
    partitions: int
    timeout_s: float
    producer_id: int = attrs.field(factory=lambda: secrets.randbits(63))
    _seq: int = 0

    def partition_of(self, key: bytes) -> int:
        """The partition a key lives in (the SDK's default partitioner)."""
        return partition_for_key(key, self.partitions)

    async def write(
        self, key: bytes, value: bytes, expected: int | None, ttl_ms: int | None = None
    ) -> int:
        """Store ``value`` (empty: a tombstone) under ``key``, if ``expected`` is None or
        the key's revision, expiring ``ttl_ms`` after it is stored (``Jet-TTL``, None:
        never); return the record's offset.

        Raises:
            WrongExpectedKeyOffset: the key is at another revision (``current_revision``).
            JetError: the write failed (retriable errors after :data:`MAX_WRITE_ATTEMPTS`).
        """
        partition = self.partition_of(key)
        headers: tuple[tuple[str, bytes], ...] = ()
        if expected is not None:
            headers = ((EXPECTED_KEY_OFFSET, str(expected).encode()),)
        if ttl_ms is not None:
            headers = (*headers, (TTL_HEADER, b"%d" % ttl_ms))
        seq = self._seq
        self._seq += 1
        request = ProduceRequest(
            self.stream,
            partition,
            AckPolicy.ALL,
            int(self.timeout_s * 1000),
            (ProduceMessage(value=value, key=key, headers=headers),),
            self.producer_id,
            seq,
        )
        last: JetError | None = None
        for _ in range(MAX_WRITE_ATTEMPTS):
            try:
                (result,) = await self.client.produce(request)
            except JetError as exc:
                if not exc.retriable:
                    raise
                last = exc
                await anyio.sleep(RETRY_PAUSE_S)
                continue
            code = result.error_code
            if code in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE):
                return result.offset
            details = {"stream": self.stream, "partition": partition, "expected": expected}
            if code == ErrorCode.WRONG_EXPECTED_KEY_OFFSET:
                current = result.offset
                now = "has no value" if current == ABSENT else f"is at revision {current}"
                raise WrongExpectedKeyOffset(
                    f"key {key[:40]!r} {now}, not {expected}",
                    details={**details, "current_revision": current},
                )
            last = error_from_code(code, f"table write to {self.stream}/{partition}", details)
            if not is_retriable(code):
                raise last
            await anyio.sleep(RETRY_PAUSE_S)
        assert last is not None
        raise last
