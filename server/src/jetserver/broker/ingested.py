"""What a partition's sequencer takes: one message as NATS or a direct Produce gave it."""

from __future__ import annotations

from jetsdk.codec.transcode import DirectRecord

__all__ = ["Ingested"]

Ingested = tuple[str, str, bytes, "tuple[tuple[str, bytes], ...] | DirectRecord | None"]
"""A message queued for the sequencer: subject, reply ("" if none), payload, and either
its NATS header lines as sent (None if none) or, for a Produce message appended directly,
where it lies in its request (the payload is then its envelope, which is not parsed)."""
