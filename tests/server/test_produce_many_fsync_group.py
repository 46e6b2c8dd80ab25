"""A ProduceMany's partitions fsynced as one group (broker/commit_group.py): a failed
fsync of one of them is that partition's alone.

One `jet server` process runs with the fsync fault shim (tests/support/fsync_fault.py):
one fdatasync of partition 2's segment fails with EIO and drops the bytes written since
its last good sync. A client sends rounds of ProduceMany requests of 4 sections (one per
partition, ack LEADER: appended at once, their fsyncs left to the request and run as one
thread job that commits each) and reads what each partition committed after each round.

Then: partition 2 was cut back to its last good sync and takes new records after it
(its HW reaches a round sent after the cut: the group handed the failure to its
flusher, which recovered; the fault may hit any round's fsync, the last one's too); the
other partitions committed everything; and after a restart every record a reader was
ever served is still there, at its offset (no HW moved past a failed fsync).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.codec.messages import (
    ProduceMessage,
    ProduceRequest,
    decode_error,
    decode_produce_response,
    encode_produce_request,
)
from jetsdk.codec.produce_many import decode_produce_many_response, encode_produce_many_request
from jetsdk.codec.record import Record
from jetserver.testing import wait_until_async
from support.fsync_fault import FsyncFault
from support.jet_server import start_server_process
from support.nats_server import NatsServer
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio

PARTITIONS = 4
FAILING = 2
ROUNDS = 12
PER_SECTION = 3
BOUND_S = 120.0
CUT = "fsync failed: cut the log back to its last good sync"


def _value(partition: int, round_: int, i: int) -> bytes:
    return b"p%d-r%02d-%d" % (partition, round_, i)


def _section(partition: int, round_: int) -> bytes:
    messages = tuple(ProduceMessage(_value(partition, round_, i)) for i in range(PER_SECTION))
    return encode_produce_request(ProduceRequest("g", partition, AckPolicy.LEADER, 5000, messages))


async def _round(c: RawClient, round_: int) -> list[list[int]]:
    """One ProduceMany of a section per partition; each section's offsets."""
    sections = [_section(p, round_) for p in range(PARTITIONS)]
    frame = await c.request(Api.PRODUCE_MANY, encode_produce_many_request(sections))
    out = []
    for section in decode_produce_many_response(frame.body):
        assert section.error_code == 0, decode_error(section.body)
        results = decode_produce_response(section.body)
        assert all(r.error_code == 0 for r in results), results
        out.append([r.offset for r in results])
    return out


async def _served(c: RawClient, partition: int) -> list[Record]:
    """The partition's committed records; none while its failed fsync is recovered (a
    retriable STORAGE_ERROR: the next round reads it again)."""
    try:
        return await c.fetch_all("g", partition)
    except ServerError as exc:
        refused = (partition, exc.error.code)
    assert refused == (FAILING, ErrorCode.STORAGE_ERROR)
    return []


async def _stored_after_restart(
    nats_server: NatsServer, data: Path, stream: str
) -> list[dict[int, bytes | None]]:
    """Every partition's records (offset -> value) as a server restarted on ``data``
    (without the fault) serves them."""
    again = start_server_process(nats_server.url, data, "--log-level", "INFO")
    try:
        with anyio.fail_after(BOUND_S):
            async with await RawClient.connect(again.address) as c:
                return [
                    {r.offset: r.value for r in await c.fetch_all(stream, p)}
                    for p in range(PARTITIONS)
                ]
    finally:
        again.stop()


async def test_a_failed_fsync_in_a_group_is_its_partitions_alone(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    data = tmp_path / "data"
    marker = tmp_path / "fault-fired"
    fault = FsyncFault(match=f"/{FAILING}/00000000000000000000.log", at=4, marker=marker)
    proc = start_server_process(nats_server.url, data, "--log-level", "INFO", env=fault.env())
    seen: list[dict[int, bytes]] = [{} for _ in range(PARTITIONS)]
    try:
        with anyio.fail_after(BOUND_S):
            async with await RawClient.connect(proc.address) as c:
                await c.create_stream(name="g", subject="g", partitions=PARTITIONS)
                for round_ in range(ROUNDS):
                    await _round(c, round_)
                    for p in range(PARTITIONS):  # what a reader is served now
                        for record in await _served(c, p):
                            assert record.value is not None
                            seen[p][record.offset] = record.value
                # Once the failed partition was cut back (the fault may hit any round's
                # fsync, the last one's too), one more round: every partition commits it,
                # the failed one too (its flusher recovered): a long poll past each.
                await wait_until_async(
                    lambda: CUT in proc.log_path.read_text(errors="replace"), BOUND_S, "the cut"
                )
                last = [section[-1] for section in await _round(c, ROUNDS)]
                for p in range(PARTITIONS):
                    got = await c.collect("g", p, 1, offset=last[p], timeout_s=30.0)
                    assert got[0].value == _value(p, ROUNDS, PER_SECTION - 1)
    finally:
        assert proc.stop() == 0
    assert marker.exists(), "the injected fsync failure never fired"

    stored = await _stored_after_restart(nats_server, data, "g")
    for p in range(PARTITIONS):
        lost = {o: v for o, v in seen[p].items() if stored[p].get(o) != v}
        assert not lost, f"partition {p}: records served to a reader then lost: {lost}"
        if p != FAILING:  # the healthy partitions: everything, in order
            expected = [_value(p, r, i) for r in range(ROUNDS + 1) for i in range(PER_SECTION)]
            assert [stored[p][o] for o in sorted(stored[p])] == expected
    # The failed partition lost the records of its failed fsync (they were acked LEADER
    # only) and took the later rounds' after its cut.
    failing = list(stored[FAILING].values())
    assert len(failing) < (ROUNDS + 1) * PER_SECTION
    assert failing[-PER_SECTION:] == [_value(FAILING, ROUNDS, i) for i in range(PER_SECTION)]


def _all_section(partition: int, round_: int, idempotent: bool) -> bytes:
    messages = tuple(ProduceMessage(_value(partition, round_, i)) for i in range(PER_SECTION))
    if not idempotent:
        request = ProduceRequest("a", partition, AckPolicy.ALL, 10000, messages)
        return encode_produce_request(request)
    # As a table's writes: one producer's sequences run across partitions, every request
    # starts its sequence.
    base = (round_ * PARTITIONS + partition) * PER_SECTION
    request = ProduceRequest(
        "a", partition, AckPolicy.ALL, 10000, messages, 7, base, sequence_start=True
    )
    return encode_produce_request(request)


@pytest.mark.parametrize("idempotent", [False, True])
async def test_all_sections_commit_as_one_group_a_failed_fsync_fails_its_own(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path, idempotent: bool
) -> None:
    """ALL sections (appended in the request's step, a table's puts with an idempotent
    producer too) leave their fsyncs to the request's group: every section answers only
    once its own partition committed it, so every record acked is still there after a
    restart; partition 2's failed fsync fails exactly its section (retriable), the other
    partitions' sections of that round succeed."""
    data = tmp_path / "data"
    marker = tmp_path / "fault-fired"
    fault = FsyncFault(match=f"/{FAILING}/00000000000000000000.log", at=4, marker=marker)
    proc = start_server_process(nats_server.url, data, "--log-level", "INFO", env=fault.env())
    acked: list[dict[int, bytes]] = [{} for _ in range(PARTITIONS)]
    refused: list[tuple[int, int]] = []
    try:
        with anyio.fail_after(BOUND_S):
            async with await RawClient.connect(proc.address) as c:
                await c.create_stream(name="a", subject="a", partitions=PARTITIONS)
                for round_ in range(ROUNDS):
                    sections = [_all_section(p, round_, idempotent) for p in range(PARTITIONS)]
                    body = encode_produce_many_request(sections)
                    frame = await c.request(Api.PRODUCE_MANY, body)
                    answers = decode_produce_many_response(frame.body)
                    for p, section in enumerate(answers):
                        assert section.error_code == 0, decode_error(section.body)
                        for i, r in enumerate(decode_produce_response(section.body)):
                            if r.error_code == 0:
                                acked[p][r.offset] = _value(p, round_, i)
                            else:
                                refused.append((p, r.error_code))
    finally:
        assert proc.stop() == 0
    assert marker.exists(), "the injected fsync failure never fired"
    assert refused, "the failed fsync's records were acked"
    assert {p for p, _code in refused} == {FAILING}, refused
    for p in range(PARTITIONS):
        if p != FAILING:
            assert len(acked[p]) == ROUNDS * PER_SECTION, p

    stored = await _stored_after_restart(nats_server, data, "a")
    for p in range(PARTITIONS):
        lost = {o: v for o, v in acked[p].items() if stored[p].get(o) != v}
        assert not lost, f"partition {p}: acked ALL, then lost: {lost}"


async def test_a_lone_all_section_commits_in_a_group_of_one_a_failed_fsync_fails_it(
    nats_server: NatsServer, tmp_path: Path, fsync_shim: Path
) -> None:
    """A ProduceMany of one ALL section (a table's round of puts to one partition, sent
    so to be appended in the request's step) leaves its fsync to a group of one: it
    answers only once committed, so every record acked is still there after a restart,
    and the failed fsync's section is refused (retriable), the next ones acked."""
    data = tmp_path / "data"
    marker = tmp_path / "fault-fired"
    fault = FsyncFault(match=f"/{FAILING}/00000000000000000000.log", at=4, marker=marker)
    proc = start_server_process(nats_server.url, data, "--log-level", "INFO", env=fault.env())
    acked: dict[int, bytes] = {}
    refused: list[int] = []
    try:
        with anyio.fail_after(BOUND_S):
            async with await RawClient.connect(proc.address) as c:
                await c.create_stream(name="a", subject="a", partitions=PARTITIONS)
                for round_ in range(ROUNDS):
                    body = encode_produce_many_request([_all_section(FAILING, round_, True)])
                    frame = await c.request(Api.PRODUCE_MANY, body)
                    (section,) = decode_produce_many_response(frame.body)
                    assert section.error_code == 0, decode_error(section.body)
                    for i, r in enumerate(decode_produce_response(section.body)):
                        if r.error_code == 0:
                            acked[r.offset] = _value(FAILING, round_, i)
                        else:
                            refused.append(r.error_code)
    finally:
        assert proc.stop() == 0
    assert marker.exists(), "the injected fsync failure never fired"
    assert refused, "the failed fsync's records were acked"
    assert len(acked) >= (ROUNDS - 1) * PER_SECTION
    stored = await _stored_after_restart(nats_server, data, "a")
    lost = {o: v for o, v in acked.items() if stored[FAILING].get(o) != v}
    assert not lost, f"acked ALL, then lost: {lost}"
