"""``bench tail``'s per-message timeline: each outlying message's grown stage and its cause.

A message's way, from the marks of ``bench tail`` (the client's and the server's hop
trace), is split into stages (:data:`WRITTEN`): ``queued`` (``send_soon`` to the client's
``write`` of the Produce carrying it: the producer's accumulator, and waiting for the
partition's request in flight), ``to server`` (that write to the server's
``req.produce``: the client's send, the network, the server's wake-up and read), ``to
append`` (the request's decoding and checks), ``write()`` (the append's ``write`` system
call), ``to push`` (the HW moving and the tailing consumer's answer pushed,
``resp.fetch_stream``, or its parked Fetch woken) and ``to consumer`` (the client's read of
that answer to the consumer's batch); with ``flushed`` (:data:`FLUSHED`) ``to fsync`` and
``fsync`` come before ``to push``. Marks are matched by time (each stage's end is the first
mark of its kind after its start): at 500 msg/s one message is usually alone on its way.

An outlier (over 3x the run's p50) is put down to the stage with the largest excess over
its own median, then to the first event given to :func:`attribute` (``bench tail``'s
order: host stalls of all CPUs, of one CPU, collections, an fsync on the server's loop,
fsyncs beyond their median, ``write()`` of 1 ms or more, periodic rounds, waits for a
CPU, a ``written`` partition's background fsync) that covers at least :data:`COVER` of
that excess inside that stage; an event of one side (named ``client ...`` or ``server
...``) only for a stage of that side, :data:`DISK` only for the commit's stages. A
``queued`` stage with none of them, of a message sent while its partition's request was
in flight (one request at a time per partition), is put down to the earlier message's
cause (counted under it; how many were is printed beside), or to ``behind an earlier
message`` if that one was no outlier. Else ``not attributed: <stage>``.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter

from bench.stats import pct

COVER = 0.3
"""The share of a grown stage's excess an event must cover to be its cause."""
_PUSH = "resp.fetch_stream|fetch.woken"
"""The tailing consumer's answer pushed from the commit, or its parked Fetch woken."""
Stage = tuple[str, str, str]
"""A stage's name, the marks that end it (``|``: any of them) and whose time it is
(``client``, ``server`` or ``both``: the waits for a CPU and collections looked at)."""
WRITTEN: tuple[Stage, ...] = (
    ("queued", "write", "client"),
    ("to server", "req.produce", "both"),
    ("to append", "append.start", "server"),
    ("write()", "append", "server"),
    ("to push", _PUSH, "server"),
    ("to consumer", "", "both"),  # (ended by the consumer's batch)
)
FLUSHED: tuple[Stage, ...] = (
    *WRITTEN[:4],
    ("to fsync", "fsync.start", "server"),
    ("fsync", "fsync.end", "server"),
    ("to push", _PUSH, "server"),
    WRITTEN[-1],
)
"""With ``flushed`` the commit waits for an fsync that starts after the append."""
_DISK_STAGES = {"to fsync", "fsync", "to push"}
DISK = "fsync beyond its p50 (the disk)"
"""The event name of the fsyncs longer than their median (the commit's stages only)."""

Span = tuple[int, int]


def _first_after(times: list[int], t: int) -> int | None:
    i = bisect.bisect_left(times, t)
    return times[i] if i < len(times) else None


def _covered(spans: list[Span], lo: int, hi: int) -> int:
    """Nanoseconds of ``spans`` (sorted by start, may overlap) inside [lo, hi]."""
    total = 0
    edge = lo
    i = max(0, bisect.bisect_left(spans, (lo, lo)) - 64)  # a long span may start earlier
    for a, b in spans[i:]:
        if a > hi:
            break
        a, b = max(a, edge), min(b, hi)
        if b > a:
            total += b - a
            edge = b
    return total


def timelines(marks: dict[str, list[int]], stages: tuple[Stage, ...]) -> list[list[int] | None]:
    """Each message's moments (sent, each stage's end), or None where the marks do not
    line up (a mark missing, or out of order)."""
    ends = [
        sorted(t for k in kinds.split("|") for t in marks.get(k, [])) for _n, kinds, _s in stages
    ][:-1]
    out: list[list[int] | None] = []
    for sent, consumed in zip(marks["sent_of"], marks["consumed"], strict=True):
        points = [sent]
        for times in ends:
            t = _first_after(times, points[-1])
            if t is None or t > consumed:
                break
            points.append(t)
        else:
            points.append(consumed)
            out.append(points)
            continue
        out.append(None)
    return out


def _applies(name: str, stage: str, side: str) -> bool:
    """Whether an event named ``name`` can hold up ``stage`` (on ``side``)."""
    if name == DISK:
        return stage in _DISK_STAGES
    if name.startswith("client"):
        return side in ("client", "both")
    if name.startswith(("server", "fsync", "append", "periodic")):
        return side in ("server", "both")
    return True  # host stalls


def attribute(
    marks: dict[str, list[int]],
    stages: tuple[Stage, ...],
    events: dict[str, list[Span]],
    p50_ms: float,
    outlier_x: float,
) -> tuple[list[float], Counter[str], Counter[str], int]:
    """Stage medians (ms), outliers by cause, outliers by grown stage, unmatched outliers.

    ``events``: name -> spans, in the order they are tried as causes (see the module
    docstring; a name starting with ``client`` or ``server`` holds up only stages of
    that side, :data:`DISK` only the commit's)."""
    lines = timelines(marks, stages)
    n = len(stages)
    durations = [[(p[k + 1] - p[k]) for k in range(n)] for p in lines if p is not None]
    if not durations:
        return [], Counter(), Counter(), 0
    med = [pct([d[k] for d in durations], 0.5) for k in range(n)]
    limit = outlier_x * p50_ms * 1e6
    causes: dict[int, str] = {}
    by_stage: Counter[str] = Counter()
    unmatched = 0
    writes = sorted(marks.get("write", []))
    answers = sorted(marks.get("got.produce", []))
    for i, p in enumerate(lines):
        sent, consumed = marks["sent_of"][i], marks["consumed"][i]
        if consumed - sent <= limit:
            continue
        if p is None:
            unmatched += 1
            continue
        excess = [(p[k + 1] - p[k]) - med[k] for k in range(n)]
        k = max(range(n), key=excess.__getitem__)
        stage, _ends, side = stages[k]
        by_stage[stage] += 1
        lo, hi, need = p[k], p[k + 1], COVER * excess[k]
        cause = ""
        for name, spans in events.items():
            if _applies(name, stage, side) and _covered(spans, lo, hi) >= need:
                cause = name
                break
        if not cause and k == 0:
            # The producer's request before it was in flight: written before ``sent``,
            # answered after. Its message is the one whose write that was.
            w = bisect.bisect_right(writes, sent) - 1
            a = bisect.bisect_left(answers, writes[w]) if w >= 0 else len(answers)
            if w >= 0 and a < len(answers) and answers[a] > sent:
                j = _message_of_write(lines, i, writes[w])
                cause = f"behind:{j}" if j is not None else "behind an earlier message"
        causes[i] = cause or f"not attributed: {stage}"
    counted: Counter[str] = Counter()
    for i, cause in causes.items():
        seen = {i}
        while cause.startswith("behind:"):
            j = int(cause.split(":")[1])
            if j in seen or j not in causes:
                cause = "behind an earlier message"
                break
            seen.add(j)
            cause = causes[j]
        if causes[i].startswith("behind:") and cause != "behind an earlier message":
            counted["  (of which behind an earlier outlier)"] += 1
        counted[cause] += 1
    return [m / 1e6 for m in med], counted, by_stage, unmatched


def _message_of_write(lines: list[list[int] | None], i: int, write: int) -> int | None:
    """The latest message before ``i`` whose request was the write at ``write``."""
    for j in range(i - 1, max(-1, i - 50), -1):
        p = lines[j]
        if p is not None and p[1] == write:
            return j
    return None


def waits_of(samples: list[tuple[int, int, int]]) -> list[Span]:
    """Spans between consecutive (ns, CPU ns, wait ns) samples of a thread, each shortened
    to the time it waited for a CPU in it (placed at its end: unknown within it)."""
    out: list[Span] = []
    for (t0, _c0, w0), (t1, _c1, w1) in itertools.pairwise(samples):
        w = min(w1 - w0, t1 - t0)
        if w > 0:
            out.append((t1 - w, t1))
    return out


def report(
    n: int,
    stages: tuple[Stage, ...],
    attributed: tuple[list[float], Counter[str], Counter[str], int],
) -> None:
    """Print what :func:`attribute` found for ``n`` messages: the stage medians and the
    outliers by grown stage and by cause."""
    med, causes, grown, unmatched = attributed
    if not med:
        print("    no message's marks line up")
        return
    per = 10_000 / n
    stages_ms = ", ".join(f"{s[0]} {m:.3f}" for s, m in zip(stages, med, strict=True))
    print(f"    stage p50s (ms): {stages_ms}")
    print(
        "    outliers by grown stage (per 10k): "
        + ", ".join(f"{s} {c * per:.0f}" for s, c in grown.most_common())
        + (f", marks not lined up {unmatched * per:.0f}" if unmatched else "")
    )
    print(f"    {'outliers by cause':<44} {'per 10k':>8}")
    for cause, count in sorted(causes.items(), key=lambda kv: (kv[0].startswith(" "), -kv[1])):
        print(f"    {cause:<44} {count * per:8.1f}")
