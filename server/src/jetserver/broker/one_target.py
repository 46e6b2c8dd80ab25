"""What the one-step Produce path (broker/produce_one.py) checks of a partition once per
change of its stream's metadata, kept on its replica.

Of :meth:`~jetserver.broker.produce_one.OneProduce._check_one`'s checks, some depend on
the message (its subject, size, the replica's queue and role now) and some only on the
stream's metadata: the stream is not internal, the partition exists and is led here, its
subject (and whether it has wildcards), whether copies go to NATS. (The size limit is the
replica's own ``max_message_bytes``, which broker/live_settings.py keeps current.) Those
are found once and kept as a :class:`OneTarget` on the replica
(``PartitionReplica.one_target``), for the :class:`StreamMeta` they were found for:
metadata is immutable and every change makes a new ``StreamMeta`` (metadata/ops.py,
``attrs.evolve``), so the one identity test ``target.meta is meta`` tells a changed
stream (an update, a leader change, a delete and create again) from the same one. A
replica opened again is a new object, with no target.

Task safety: event loop thread only.
"""

from __future__ import annotations

import attrs

from jetserver.metadata.model import StreamMeta

__all__ = ["OneTarget"]


@attrs.frozen
class OneTarget:
    """A partition's checks that change only with its stream's metadata (module
    docstring)."""

    meta: StreamMeta
    """The stream's metadata they were found for (compared by identity)."""
    subject: str
    """The partition's subject."""
    wildcard: bool
    """True if :attr:`subject` has wildcards (each message then names its own)."""
    copies: bool
    """True unless the stream has ``no_nats_copies``."""
