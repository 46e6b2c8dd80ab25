"""The parts of creating a stream that a single server and a cluster share: the
CreateStream operation a proposer builds, and how its result is answered and logged.

Where the operation goes differs (the single server's metadata store, or the metadata Raft
with placement and retries: ``broker/streams.py`` and ``cluster/forwarding.py``).
"""

from __future__ import annotations

import logging
import secrets
import time

from jetserver.errors import ApiError
from jetserver.logs import fields
from jetserver.metadata.model import StreamMeta, StreamSpec
from jetserver.metadata.ops import CreateStream, OpResult

log = logging.getLogger("jetserver.streams")

STREAM_ID_BYTES = 4
"""Random bytes of a stream incarnation's id (hex: twice as many characters)."""


def create_stream_op(spec: StreamSpec, replicas: tuple[tuple[str, ...], ...]) -> CreateStream:
    """A CreateStream for ``spec`` with a fresh incarnation id, created now."""
    return CreateStream(
        spec=spec,
        stream_id=secrets.token_hex(STREAM_ID_BYTES),
        created_ns=time.time_ns(),
        replicas=replicas,
    )


def created_stream(result: OpResult, spec: StreamSpec) -> StreamMeta:
    """The stream a CreateStream result holds (logging it if it is new).

    Raises:
        ApiError: the operation was refused (its code, naming the stream).
    """
    if not result.ok:
        raise ApiError(result.error_code, result.message, {"stream": spec.name})
    assert result.stream is not None
    if result.created:
        log.info(
            "stream created",
            extra=fields(
                stream=spec.name,
                subject=spec.subject,
                partitions=spec.partitions,
                group=spec.group,
                replication_factor=spec.replication_factor,
                leaders=",".join(a.leader for a in result.stream.partitions),
            ),
        )
    return result.stream
