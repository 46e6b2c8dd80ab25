"""Invariant checkers for the fault tests: pure functions over what the drivers recorded.

Each ``check_*`` returns a list of violations (human-readable strings); an empty list means
the invariant holds. :func:`assert_clean` fails a test with the first violations of each.

* :func:`check_acked_stored`   every acknowledged message is stored at its acked offset
* :func:`check_exactly_once`   no payload id and no (producer id, sequence) stored twice
* :func:`check_order`          per partition: offsets increase; a producer's payloads are
                                stored in send order
* :func:`check_hw_monotonic`   the HW reported by a replica never decreases (per process
                                incarnation: a restart may start again from its checkpoint)
* :func:`check_replicas_identical`  every replica holds the same record bytes below a bound
* :func:`check_consumed`       a consumer saw each partition's offsets in order without gaps
                                or repeats, and every acknowledged message
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import attrs

MAX_REPORTED = 20
"""Violations shown per failed check."""


@attrs.frozen
class Acked:
    """A message the producer got an ack for."""

    partition: int
    """Partition it was sent to."""
    offset: int
    """Offset in the ack."""
    payload_id: str
    """The payload id (``<tag>-<counter>``) the driver put at the start of the value."""
    at: float
    """time.monotonic() when the ack arrived."""


@attrs.frozen
class Stored:
    """One record as a replica (or the leader, via Fetch) holds it."""

    partition: int
    """Partition number."""
    offset: int
    """Its offset."""
    payload_id: str | None
    """The driver's payload id, or None for a record the driver did not write."""
    producer_id: int | None
    """Idempotent producer id, if any."""
    producer_seq: int
    """Producer sequence (0 without a producer id)."""
    leader_epoch: int
    """Leader epoch stored in the record."""
    raw: bytes = attrs.field(repr=False)
    """The record's bytes as stored (header included)."""
    corrupt: bool = False
    """The record failed its CRC or did not decode (read from a damaged file)."""


@attrs.frozen
class HwSample:
    """One HW/LEO observation of a replica (a per-server DescribeStream)."""

    server_id: str
    """The answering server."""
    incarnation: int
    """Which start of that server's process answered (1 = first)."""
    partition: int
    """Partition number."""
    hw: int
    """The high watermark it reported."""
    leo: int | None
    """The log end offset it reported, if any."""
    at: float
    """time.monotonic() of the answer."""


def payload_id_of(value: bytes) -> str | None:
    """The payload id at the start of a driver-written value (``<id>|...``), else None."""
    head, sep, _ = value.partition(b"|")
    if not sep or len(head) > 64:
        return None
    try:
        return head.decode("ascii")
    except UnicodeDecodeError:
        return None


def payload_counter(payload_id: str) -> int:
    """The counter of a payload id ``<tag>-<counter>``."""
    return int(payload_id.rsplit("-", 1)[1])


def by_partition(records: Iterable[Stored]) -> dict[int, list[Stored]]:
    """Records grouped by partition, each list in offset order."""
    out: dict[int, list[Stored]] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r.offset)
    return out


def check_acked_stored(acked: Iterable[Acked], stored: Mapping[int, Sequence[Stored]]) -> list[str]:
    """Every acked (partition, offset, payload id) is stored at that offset."""
    index = {(p, r.offset): r for p, rs in stored.items() for r in rs}
    out = []
    for a in acked:
        r = index.get((a.partition, a.offset))
        if r is None:
            out.append(f"acked {a.payload_id} at {a.partition}/{a.offset} is missing")
        elif r.payload_id != a.payload_id:
            out.append(
                f"acked {a.payload_id} at {a.partition}/{a.offset}, but {r.payload_id} is there"
            )
    return out


def check_exactly_once(stored: Mapping[int, Sequence[Stored]]) -> list[str]:
    """No payload id is stored twice (anywhere), no (producer id, seq) twice in a partition."""
    out = []
    seen: dict[str, tuple[int, int]] = {}
    for p, rs in sorted(stored.items()):
        seqs: dict[tuple[int, int], int] = {}
        for r in rs:
            if r.payload_id is not None:
                first = seen.setdefault(r.payload_id, (p, r.offset))
                if first != (p, r.offset):
                    out.append(f"{r.payload_id} stored twice: at {first} and at {(p, r.offset)}")
            if r.producer_id is not None:
                key = (r.producer_id, r.producer_seq)
                prev = seqs.setdefault(key, r.offset)
                if prev != r.offset:
                    out.append(
                        f"producer {r.producer_id} seq {r.producer_seq} stored twice in "
                        f"partition {p}: offsets {prev} and {r.offset}"
                    )
    return out


def check_order(stored: Mapping[int, Sequence[Stored]]) -> list[str]:
    """Per partition: offsets strictly increase, and each payload tag's counters increase."""
    out = []
    for p, rs in sorted(stored.items()):
        last_offset = -1
        last_counter: dict[str, tuple[int, int]] = {}
        for r in rs:
            if r.offset <= last_offset:
                out.append(f"partition {p}: offset {r.offset} after {last_offset}")
            last_offset = r.offset
            if r.payload_id is None:
                continue
            tag = r.payload_id.rsplit("-", 1)[0]
            counter = payload_counter(r.payload_id)
            prev = last_counter.get(tag)
            if prev is not None and counter <= prev[0]:
                out.append(
                    f"partition {p}: {r.payload_id} at {r.offset} after counter {prev[0]} "
                    f"at {prev[1]} (sent earlier, stored later)"
                )
            last_counter[tag] = (counter, r.offset)
    return out


def check_hw_monotonic(samples: Iterable[HwSample]) -> list[str]:
    """Per (server, incarnation, partition), the reported HW never decreases."""
    out = []
    last: dict[tuple[str, int, int], HwSample] = {}
    for s in samples:
        key = (s.server_id, s.incarnation, s.partition)
        prev = last.get(key)
        if prev is not None and s.hw < prev.hw:
            out.append(
                f"{s.server_id} (start {s.incarnation}) partition {s.partition}: HW went from "
                f"{prev.hw} to {s.hw} ({s.at - prev.at:.3f} s later)"
            )
        if prev is None or s.hw >= prev.hw:
            last[key] = s
    return out


def check_replicas_identical(
    logs: Mapping[str, Sequence[Stored]], upto: int, *, log_start: int = 0
) -> list[str]:
    """Every replica holds exactly the same record bytes at every offset in [log_start, upto)."""
    out = []
    names = sorted(logs)
    if not names:
        return ["no replica to compare"]
    views = {n: {r.offset: r for r in logs[n] if log_start <= r.offset < upto} for n in names}
    ref = names[0]
    for n in names:
        have = views[n]
        missing = [o for o in range(log_start, upto) if o not in have]
        if missing:
            out.append(f"{n}: {len(missing)} offsets below {upto} missing, first {missing[:5]}")
        corrupt = sorted(o for o, r in have.items() if r.corrupt)
        if corrupt:
            out.append(f"{n}: {len(corrupt)} corrupt records below {upto}, first {corrupt[:5]}")
    for offset in range(log_start, upto):
        base = views[ref].get(offset)
        for n in names[1:]:
            other = views[n].get(offset)
            if base is not None and other is not None and other.raw != base.raw:
                out.append(
                    f"offset {offset}: {n} differs from {ref} "
                    f"(epochs {other.leader_epoch}/{base.leader_epoch}, "
                    f"payloads {other.payload_id}/{base.payload_id})"
                )
    return out


def check_consumed(
    consumed: Sequence[Stored], acked: Iterable[Acked], *, start: Mapping[int, int] | None = None
) -> list[str]:
    """The consumer got each partition's offsets in order, without gaps or repeats (from
    ``start[p]``, default 0), and every acknowledged message below what it reached."""
    out = []
    next_offset: dict[int, int] = dict(start or {})
    got: dict[tuple[int, int], Stored] = {}
    for r in consumed:
        expected = next_offset.get(r.partition, 0)
        if r.offset != expected:
            out.append(f"consumer: partition {r.partition} offset {r.offset}, expected {expected}")
        next_offset[r.partition] = r.offset + 1
        got[(r.partition, r.offset)] = r
    for a in acked:
        if a.offset >= next_offset.get(a.partition, 0):
            continue  # not reached yet
        seen = got.get((a.partition, a.offset))
        if seen is None or seen.payload_id != a.payload_id:
            out.append(f"consumer: acked {a.payload_id} at {a.partition}/{a.offset} not seen")
    return out


_LEADS = re.compile(
    r"assignment applied stream=(?P<stream>\S+) partition=(?P<partition>\d+) role=leader "
    r".*?leader_epoch=(?P<epoch>\d+)"
)
"""A replica's own line (DEBUG)."""
_LED = re.compile(r"assignments applied .*? led=(?P<led>\S+)")
"""The summary line of a burst (INFO): ``led=stream/partition@epoch,...``."""


def leaderships(logs: Mapping[str, str]) -> dict[tuple[str, int, int], set[str]]:
    """(stream, partition, leader epoch) -> the servers whose log says they took the
    leader role in it (``logs``: server id -> its whole log)."""
    out: dict[tuple[str, int, int], set[str]] = {}
    for server, text in logs.items():
        for m in _LEADS.finditer(text):
            key = (m["stream"], int(m["partition"]), int(m["epoch"]))
            out.setdefault(key, set()).add(server)
        for m in _LED.finditer(text):
            for one in m["led"].split(","):
                where, _, epoch = one.rpartition("@")
                stream, _, partition = where.rpartition("/")
                out.setdefault((stream, int(partition), int(epoch)), set()).add(server)
    return out


def check_one_leader_per_epoch(logs: Mapping[str, str]) -> list[str]:
    """No two servers led one partition in one leader epoch."""
    return [
        f"{stream}/{partition} epoch {epoch} led by {sorted(servers)}"
        for (stream, partition, epoch), servers in sorted(leaderships(logs).items())
        if len(servers) > 1
    ]


def assert_clean(**checks: list[str]) -> None:
    """Fail with the first violations of every check that found any."""
    failed = {name: v for name, v in checks.items() if v}
    if failed:
        lines = []
        for name, violations in failed.items():
            lines.append(f"{name}: {len(violations)} violation(s)")
            lines.extend(f"  {v}" for v in violations[:MAX_REPORTED])
        raise AssertionError("\n".join(lines))
