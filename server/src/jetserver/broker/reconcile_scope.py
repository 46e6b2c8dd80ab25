"""Which partitions a cluster reconcile looks at: only those whose assignment changed.

:meth:`~jetserver.broker.streams.StreamManager.reconcile` runs at every metadata change.
Scanning every assignment of the whole state each time (10,000 partitions x 3 replicas) was
the most frequent frame on the survivors' event loops during a failover, which applies many
changes. The metadata is immutable and every change replaces only what it changes
(:func:`jetserver.metadata.ops.apply` keeps the other :class:`StreamMeta` and
:class:`PartitionAssignment` objects), so identity against the last reconciled state tells
which assignments changed.

A plan examines:

- every partition (a full scan) at the first reconcile, after one that did not finish,
  when the client addresses of the servers change (every target names them), when
  ``collect`` is first asked (the state is then known current), and after a stop;
- else the partitions of streams whose :class:`StreamMeta` object changed (all of a stream
  created, deleted or re-created with a new id; else those whose assignment object
  changed), and the partitions wanted last time that could not open (tried again).

What it does with what it examines is what the full scan did with every partition. The
data directory is listed for the data of deleted streams (``collect``) at a full scan and
when a stream went (deleted or re-created), not at every change (a removal that failed is
tried again then, not at the next change).
Task safety: used under the reconcile lock of the stream manager.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from jetserver.broker.running import RunningPartition, Wanted
from jetserver.metadata.model import MetadataState, PartitionAssignment, StreamMeta

Key = tuple[str, int]
Want = tuple[StreamMeta, PartitionAssignment]


@attrs.frozen
class ReconcilePlan:
    """The partitions one reconcile examines and what this server wants of them."""

    state: MetadataState
    addresses: dict[str, str]
    """Server id -> client address (part of every target)."""
    examined: frozenset[Key] | None
    """The partitions examined (None: every one, a full scan)."""
    wanted: dict[Key, Want]
    """The examined partitions this server holds a replica of."""
    collect: bool
    """Remove the data of the streams not in ``state``: asked, and a full scan or a stream
    gone (deleted or re-created) since the last reconcile (listing the data directory at
    every change cost more than the rest of a reconcile of one change)."""

    def stale(self, running: Mapping[Key, RunningPartition]) -> list[tuple[Key, RunningPartition]]:
        """The running replicas to close: not held any more, or of an older stream."""
        if self.examined is None:
            items = list(running.items())
        else:
            items = [(k, running[k]) for k in self.examined if k in running]
        out = []
        for key, opened in items:
            want = self.wanted.get(key)
            if want is None or want[0].stream_id != opened.stream_id:
                out.append((key, opened))
        return out

    def to_open(self, running: Mapping[Key, RunningPartition]) -> list[Want]:
        """The wanted partitions not running, by key."""
        return [w for _key, w in sorted(kw for kw in self.wanted.items() if kw[0] not in running)]

    def retarget(self, running: Mapping[Key, RunningPartition]) -> list[RunningPartition]:
        """Hand each wanted running replica its target; those whose target changed (woken)."""
        woken: list[RunningPartition] = []
        named: dict[tuple[str, ...], tuple[tuple[str, str], ...]] = {}  # replicas: few sets
        for key, (_meta, a) in self.wanted.items():
            opened = running.get(key)
            if opened is None:  # could not open: offline
                continue
            replicas = named.get(a.replicas)
            if replicas is None:
                replicas = tuple((r, self.addresses.get(r, "")) for r in a.replicas)
                named[a.replicas] = replicas
            target: Wanted = (a, replicas)
            if opened.wanted != target:
                opened.wanted = target
                opened.wake.set()
                woken.append(opened)
        return woken


@attrs.define(eq=False)
class ReconcileScope:
    """Plans each reconcile against the last one that finished (see the module docstring)."""

    server_id: str
    _streams: dict[str, StreamMeta] | None = None
    """The streams of the last finished reconcile (None: scan everything next)."""
    _addresses: dict[str, str] = attrs.field(factory=dict)
    _collected: bool = False
    _unopened: set[Key] = attrs.field(factory=set)
    """Wanted at the last reconcile but not running (could not open)."""
    examined: int = 0
    """Assignments examined so far (tests and benchmarks count the work)."""

    def forget(self) -> None:
        """Scan everything at the next reconcile (the running replicas changed outside it)."""
        self._streams = None

    def plan(self, state: MetadataState, *, collect: bool) -> ReconcilePlan:
        """What the reconcile of ``state`` examines; :meth:`done` once it finished."""
        last, self._streams = self._streams, None  # not finished: a full scan next time
        addresses = state.client_addresses()
        me = self.server_id
        wanted: dict[Key, Want] = {}
        if last is None or addresses != self._addresses or (collect and not self._collected):
            for meta in state.streams.values():
                for a in meta.partitions:
                    if me in a.replicas:
                        wanted[(meta.name, a.partition)] = (meta, a)
            self.examined += sum(len(m.partitions) for m in state.streams.values())
            return ReconcilePlan(state, addresses, None, wanted, collect)
        changed, gone = _changed(last, state.streams)
        for key in self._unopened:
            if key not in changed:
                changed[key] = _assignment(state.streams, key)
        for key, want in changed.items():
            if want is not None and me in want[1].replicas:
                wanted[key] = want
        self.examined += len(changed)
        return ReconcilePlan(state, addresses, frozenset(changed), wanted, collect and gone)

    def done(self, plan: ReconcilePlan, running: Mapping[Key, RunningPartition]) -> None:
        """The reconcile of ``plan`` finished; the next one is planned against it."""
        self._streams = dict(plan.state.streams)
        self._addresses = plan.addresses
        self._collected = self._collected or plan.collect
        self._unopened = {k for k in plan.wanted if k not in running}


def _changed(
    old: Mapping[str, StreamMeta], new: Mapping[str, StreamMeta]
) -> tuple[dict[Key, Want | None], bool]:
    """The partitions whose assignment in ``new`` is not the object it was in ``old``, with
    their assignment in ``new`` (None: not there any more); and whether a stream of ``old``
    is gone (deleted, or re-created with a new id)."""
    keys: dict[Key, Want | None] = {}
    gone = False
    kept = 0
    for name, meta in new.items():
        before = old.get(name)
        if before is not None:
            kept += 1
        if before is meta:
            continue
        if (
            before is None
            or before.stream_id != meta.stream_id
            or len(before.partitions) != len(meta.partitions)
        ):
            if before is not None:
                gone = gone or before.stream_id != meta.stream_id
                keys.update(((name, a.partition), None) for a in before.partitions)
            keys.update(((name, a.partition), (meta, a)) for a in meta.partitions)
            continue
        for was, now in zip(before.partitions, meta.partitions, strict=True):
            if was is not now:
                keys[(name, now.partition)] = (meta, now)
    if kept < len(old):  # streams deleted
        gone = True
        for name, meta in old.items():
            if name not in new:
                keys.update(((name, a.partition), None) for a in meta.partitions)
    return keys, gone


def _assignment(streams: Mapping[str, StreamMeta], key: Key) -> Want | None:
    meta = streams.get(key[0])
    if meta is None or not 0 <= key[1] < len(meta.partitions):
        return None
    return meta, meta.partitions[key[1]]  # in partition order (StreamMeta.partitions)
