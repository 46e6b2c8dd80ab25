"""What a partition's sequencer takes: a message from NATS, or a direct Produce batch."""

from __future__ import annotations

from jetserver.broker.direct import DirectBatch

__all__ = ["Ingested", "Queued"]

Ingested = tuple[str, str, bytes, "tuple[tuple[str, bytes], ...] | None"]
"""A message from NATS queued for the sequencer: subject, reply ("" if none), payload, and
its NATS header lines as sent (None if none)."""

Queued = Ingested | DirectBatch
"""An entry of the sequencer's queue: one NATS message, or every message of one Produce
request appended directly (:mod:`jetserver.broker.direct`)."""
