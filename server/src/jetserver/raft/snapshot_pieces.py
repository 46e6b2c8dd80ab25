"""The metadata snapshot's parts that did not change, encoded once.

A snapshot (:func:`~jetserver.raft.machine.machine_to_dict`, PySyncObj's full dump) is
written by the Raft thread whenever the journal passes its byte bound, and at 10,000
partitions it encoded every stream and every remembered result again each time: 0.6-0.8 s
of CPU (100 streams of 100 and 1,024 remembered ops, loaded machine), all of it holding the
interpreter lock. In a failover the bound is passed right after the election
and ISR entries (py-spy of the survivors of a 3,000-partition kill -9, 2026-11-30: their
Raft threads spent 1.4-2.9 s in ``Serializer.serialize`` in the 15 s after the kill, most of
it re-encoding the 1,024 remembered results, while the event loops waited for the lock).

The state's values are frozen and replaced, never mutated, when they change: a
:class:`~jetserver.metadata.model.StreamMeta` or a remembered op that is the same object as
at the last snapshot encodes to the same bytes. :class:`SnapshotPieces` keeps each one's
encoding (an ``orjson.Fragment``, embedded as is by ``orjson.dumps``) by identity and
encodes only what is new; the snapshot's bytes are exactly those of the plain encoding.
Entries not used by a snapshot are dropped at its end (what it holds is the last
snapshot's objects).

Thread safety: one instance per Raft host, used by its Raft thread only.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

from jetserver.metadata.model import StreamMeta
from jetserver.raft.machine import MachineState, RememberedOp, machine_to_dict, result_to_dict

__all__ = ["SnapshotPieces"]


@attrs.define(eq=False)
class SnapshotPieces:
    """Encodings of the last snapshot's streams and remembered results (module docstring)."""

    _streams: dict[int, tuple[StreamMeta, orjson.Fragment]] = attrs.field(factory=dict)
    """id(stream) -> (the stream, its encoding); the stream held so that the id stays its."""
    _results: dict[int, tuple[RememberedOp, orjson.Fragment]] = attrs.field(factory=dict)
    """id(remembered op) -> (it, its result's encoding)."""
    encoded: int = 0
    """Streams and results encoded so far (not taken from the last snapshot; for tests)."""

    def machine(self, state: MachineState) -> dict[str, Any]:
        """:func:`~jetserver.raft.machine.machine_to_dict` of ``state``, each stream and
        remembered result encoded at the last snapshot taken as it was."""
        streams: dict[int, tuple[StreamMeta, orjson.Fragment]] = {}
        results: dict[int, tuple[RememberedOp, orjson.Fragment]] = {}

        def stream(meta: StreamMeta) -> orjson.Fragment:
            key = id(meta)
            known = self._streams.get(key)
            if known is None or known[0] is not meta:
                known = (meta, orjson.Fragment(orjson.dumps(meta.to_dict())))
                self.encoded += 1
            streams[key] = known
            return known[1]

        def result(seen: RememberedOp) -> orjson.Fragment:
            key = id(seen)
            known = self._results.get(key)
            if known is None or known[0] is not seen:
                known = (seen, orjson.Fragment(orjson.dumps(result_to_dict(seen.result))))
                self.encoded += 1
            results[key] = known
            return known[1]

        out = machine_to_dict(state, stream=stream, result=result)
        self._streams, self._results = streams, results
        return out
