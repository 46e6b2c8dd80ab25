"""The share-group state machine and records (spec/share-groups.md §3-§4), case by case."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from jetsdk.errors import JetError
from jetsdk.share.member import LostOutcome, ShareConfig, ShareMember
from jetsdk.share.pace import RateMeter
from jetsdk.share.records import (
    Claim,
    InvalidShareRecord,
    Settings,
    Settle,
    UnsupportedShareVersion,
    decode_share_record,
    encode_share_record,
    runs_of,
    share_stream_name,
)
from jetsdk.share.state import (
    ACKED,
    ACQUIRED,
    AVAILABLE,
    DEAD,
    DEAD_PENDING,
    Acquired,
    ClaimLost,
    Fenced,
    Returned,
    ShareState,
)

SPEC = Path(__file__).resolve().parents[2] / "spec" / "share-groups.md"
_BLOCK = re.compile(r"<!-- example -->\s*```json\n(.*?)\n```", re.S)
S = 1_000_000_000
G = "g"


def claim(member: str, start: int, end: int, lease_ms: int = 1000, maxd: int = 3) -> Claim:
    return Claim(G, member, "s", 0, start, end, lease_ms, maxd, None)


def settle(member: str, start: int, lease: int, **kw: object) -> Settle:
    return Settle(G, member, "s", 0, start, lease, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", _BLOCK.findall(SPEC.read_text(encoding="utf-8")))
def test_spec_examples_are_canonical(text: str) -> None:
    raw = text.encode()
    assert encode_share_record(decode_share_record(raw)) == raw


def test_spec_has_both_examples() -> None:
    assert len(_BLOCK.findall(SPEC.read_text(encoding="utf-8"))) == 4


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b'{"v":1,"type":"claim","group":"g","member":"m","stream":"s","partition":0,"start":5,"end":5,"lease_ms":1,"max_deliveries":1}',
        b'{"v":1,"type":"claim","group":"g","member":"m","stream":"s","partition":0,"start":0,"end":5,"lease_ms":0,"max_deliveries":1}',
        b'{"v":1,"type":"settle","group":"g","member":"m\\u0001","stream":"s","partition":0,"start":0,"lease":1}',
        b'{"v":1,"type":"settle","group":"g","member":"m","stream":"s","partition":0,"start":0,"lease":1,"acked":[[3,3]]}',
        b'{"v":1,"type":"nope","group":"g","member":"m","stream":"s","partition":0,"start":0}',
        b'{"v":true,"type":"claim"}',
    ],
)
def test_invalid_records_are_refused(raw: bytes) -> None:
    with pytest.raises(InvalidShareRecord):
        decode_share_record(raw)


def test_newer_version_stops_the_reader() -> None:
    with pytest.raises(UnsupportedShareVersion):
        decode_share_record(b'{"v":3,"type":"claim"}')
    state = ShareState(G)
    with pytest.raises(UnsupportedShareVersion):
        state.apply_bytes(0, 1, b'{"v":3,"type":"claim","group":"%s"}' % G.encode())


def test_other_groups_newer_records_are_skipped() -> None:
    """A newer record not of this group (or naming none) is skipped, not fatal."""
    state = ShareState(G)
    assert state.apply_bytes(0, 1, b'{"v":99}') == []
    assert state.apply_bytes(1, 1, b'{"v":99,"type":"claim","group":"other"}') == []
    assert state.skipped == 2
    assert state.last_offset == 1


def test_invalid_record_is_skipped_by_the_state() -> None:
    state = ShareState(G)
    assert state.apply_bytes(0, 1, b"not json") == []
    assert state.skipped == 1
    assert state.last_offset == 0


def test_names_and_runs() -> None:
    assert share_stream_name("workers") == "__share.workers"
    with pytest.raises(ValueError):
        share_stream_name("bad name")
    assert runs_of({5, 1, 2, 3, 7, 8}) == [(1, 4), (5, 6), (7, 9)]


def test_first_claim_wins_and_the_second_is_lost() -> None:
    state = ShareState(G)
    won = state.apply(0, 10 * S, claim("a", 0, 3))
    offsets = ((0, 1, False), (1, 1, False), (2, 1, False))
    assert won == [Acquired("a", "s", 0, 0, 0, 11 * S, offsets, 0)]
    assert state.apply(1, 10 * S, claim("b", 0, 3)) == [ClaimLost("b", "s", 0, 0)]
    # b's view was stale: the range is held until a's deadline.
    assert state.apply(2, 11 * S, claim("b", 0, 3)) == [ClaimLost("b", "s", 0, 0)]
    assert state.partition("s", 0).speo == 3
    # A new range is claimed at SPEO only.
    assert isinstance(state.apply(3, 11 * S, claim("b", 3, 6))[0], Acquired)
    assert state.apply(4, 11 * S, claim("c", 4, 9)) == [ClaimLost("c", "s", 0, 4)]


def test_expiry_gives_the_range_to_the_next_claim_and_counts_it() -> None:
    state = ShareState(G)
    state.apply(0, 10 * S, claim("a", 0, 2))
    state.apply(1, 10 * S + 1, settle("a", 0, 0, acked=((0, 1),)))
    (won,) = state.apply(2, 11 * S + 1, claim("b", 0, 2))
    assert isinstance(won, Acquired)
    assert won.offsets == ((1, 2, False),)
    # a's late settle is fenced: offset 1 is b's lease's now.
    late = settle("a", 0, 0, acked=((1, 2),))
    assert state.apply(3, 11 * S + 2, late) == [Fenced("a", late)]
    r = state.partition("s", 0).ranges[0]
    assert r.states[1] == ACQUIRED
    assert (r.owners[1], r.leases[2].holder) == (2, "b")
    assert state.partition("s", 0).acked_total == 1
    state.apply(4, 11 * S + 3, settle("b", 0, 2, acked=((1, 2),)))
    ps = state.partition("s", 0)
    assert ps.spso == 2
    assert not ps.ranges
    assert ps.acked_total == 2


def test_late_settle_before_another_claim_applies() -> None:
    state = ShareState(G)
    state.apply(0, 10 * S, claim("a", 0, 1))
    state.apply(1, 20 * S, settle("a", 0, 0, acked=((0, 1),)))
    assert state.partition("s", 0).spso == 1


def test_extend_only_before_the_deadline() -> None:
    state = ShareState(G)
    state.apply(0, 10 * S, claim("a", 0, 1))
    state.apply(1, 10 * S + S // 2, settle("a", 0, 0, extend=True))
    r = state.partition("s", 0).ranges[0]
    assert r.leases[0].deadline == 11 * S + S // 2
    state.apply(2, 12 * S, settle("a", 0, 0, extend=True))
    assert r.leases[0].deadline == 11 * S + S // 2
    assert state.apply(3, 12 * S, claim("b", 0, 1))[0].member == "b"  # type: ignore[union-attr]


def test_nack_with_not_before_and_lease_end_when_all_settled() -> None:
    state = ShareState(G)
    state.apply(0, 10 * S, claim("a", 0, 2))
    state.apply(1, 10 * S, settle("a", 0, 0, acked=((0, 1),), released=((1, 12 * S),)))
    r = state.partition("s", 0).ranges[0]
    assert not r.leases  # a holds nothing: its lease is over
    assert r.states[1] == AVAILABLE
    assert state.apply(2, 11 * S, claim("b", 0, 2)) == [ClaimLost("b", "s", 0, 0)]
    (won,) = state.apply(3, 12 * S, claim("b", 0, 2))
    assert isinstance(won, Acquired)
    assert won.offsets == ((1, 2, False),)


def test_max_deliveries_and_reject_make_dead_pending_once() -> None:
    state = ShareState(G)
    state.apply(0, 1 * S, claim("a", 0, 2, maxd=1))
    state.apply(1, 1 * S, settle("a", 0, 0, released=((0, 0),), rejected=((1, 2),), dlq_hw=7))
    r = state.partition("s", 0).ranges[0]
    assert r.states[0] == AVAILABLE
    assert r.states[1] == DEAD_PENDING
    assert r.dlq_from == {1: 7}
    assert r.leases[0].holder == "a"  # still holds the dead_pending offset
    # a dies; after the deadline b gets both: 0 is at max_deliveries, 1 is still to dead-letter.
    (won,) = state.apply(2, 3 * S, Claim(G, "b", "s", 0, 0, 2, 1000, 1, dlq_hw=9))
    assert isinstance(won, Acquired)
    assert won.offsets == ((0, 1, True), (1, 1, True))
    assert r.dlq_from == {0: 9, 1: 7}
    assert r.counts == [1, 1]
    state.apply(3, 3 * S, settle("b", 0, 2, dead=((0, 2),), acked=((0, 2),)))
    ps = state.partition("s", 0)
    assert ps.dead_total == 2
    assert ps.acked_total == 0
    assert ps.spso == 2
    assert state.partition("s", 0).state_of(0) in (ACKED, DEAD)


def test_other_groups_and_replays_are_ignored() -> None:
    state = ShareState(G)
    assert state.apply(0, S, Claim("other", "a", "s", 0, 0, 1, 1000, 1)) == []
    state.apply(1, S, claim("a", 0, 1))
    assert state.apply(1, S, claim("b", 1, 2)) == []  # offset not past last_offset
    assert state.partition("s", 0).speo == 1


def test_claims_at_speo_never_collide() -> None:
    state = ShareState(G)
    at_speo = [Claim(G, m, "s", 0, None, 450, 1000, 3, None, 200) for m in ("a", "b", "c", "a")]
    changes = [state.apply(i, S, c)[0] for i, c in enumerate(at_speo)]
    won = [(c.member, c.start, c.offsets[-1][0]) for c in changes if isinstance(c, Acquired)]
    assert won == [("a", 0, 199), ("b", 200, 399), ("c", 400, 449)]
    assert changes[3] == ClaimLost("a", "s", 0, None)  # nothing left below the claimant's HW
    assert state.partition("s", 0).speo == 450


def test_claim_at_speo_needs_a_size() -> None:
    raw = encode_share_record(Claim(G, "a", "s", 0, None, 10, 1000, 3, None, None))
    with pytest.raises(InvalidShareRecord):
        decode_share_record(raw)


def test_returned_offsets_do_not_count_and_end_the_lease() -> None:
    state = ShareState(G)
    state.apply(0, 10 * S, claim("a", 0, 3))
    # a handed out 0 (acked) and gives back 1 and 2, never handed out.
    (change,) = state.apply(1, 10 * S, settle("a", 0, 0, acked=((0, 1),), returned=((1, 3),)))
    assert change == Returned("a", "s", 0, (1, 2))
    r = state.partition("s", 0).ranges[0]
    assert r.counts == [1, 0, 0]
    assert not r.leases  # nothing held: the next claim does not wait for the deadline
    (won,) = state.apply(2, 10 * S, claim("b", 0, 3))
    assert isinstance(won, Acquired)
    assert won.offsets == ((1, 1, False), (2, 1, False))
    # A settle of a lease that moved on is ignored (b holds it now), and says so.
    late = settle("a", 0, 0, returned=((1, 3),))
    assert state.apply(3, 10 * S, late) == [Fenced("a", late)]
    assert r.counts == [1, 1, 1]


def test_a_claim_with_a_size_takes_that_many_and_frees_the_rest() -> None:
    state = ShareState(G)
    state.apply(0, 10 * S, claim("a", 0, 4))
    # a's lease runs out holding all four; b asks for two.
    sized = Claim(G, "b", "s", 0, 0, 4, 1000, 3, None, 2)
    (won,) = state.apply(1, 12 * S, sized)
    assert isinstance(won, Acquired)
    assert won.offsets == ((0, 2, False), (1, 2, False))
    r = state.partition("s", 0).ranges[0]
    assert bytes(r.states) == bytes([ACQUIRED, ACQUIRED, AVAILABLE, AVAILABLE])
    assert r.counts == [2, 2, 1, 1]  # a's lease counted; b did not acquire 2 and 3
    assert r.leases[1].held == 2
    # The rest of the range goes to another member at once: leases are per offset.
    (other,) = state.apply(2, 12 * S, Claim(G, "c", "s", 0, 0, 4, 1000, 3, None, 2))
    assert isinstance(other, Acquired)
    assert other.offsets == ((2, 2, False), (3, 2, False))
    assert r.owners == [1, 1, 2, 2]


def test_renew_keeps_one_message_past_its_lease() -> None:
    """Per-message in progress: a renews offset 0 only; after a's lease deadline, b gets the
    other offsets, not 0, and a's later ack of 0 applies."""
    state = ShareState(G)
    state.apply(0, 10 * S, claim("a", 0, 3))
    state.apply(1, 10 * S + S // 2, settle("a", 0, 0, renew=((0, 1),)))
    (won,) = state.apply(2, 11 * S + 1, claim("b", 0, 3))
    assert isinstance(won, Acquired)
    assert won.offsets == ((1, 2, False), (2, 2, False))
    assert state.apply(3, 11 * S + 2, settle("a", 0, 0, acked=((0, 1),))) == []
    ps = state.partition("s", 0)
    assert ps.acked_total == 1
    # b renews 1 just before its lease's deadline (12 s): at 12.5 s c gets 2 only.
    state.apply(4, 12 * S, settle("b", 0, 2, renew=((1, 2),)))
    (late,) = state.apply(5, 12 * S + S // 2, claim("c", 0, 3))
    assert isinstance(late, Acquired)
    assert late.offsets == ((2, 3, False),)
    # A renew after the offset's deadline does not revive it.
    state.apply(6, 14 * S, settle("b", 0, 2, renew=((1, 2),)))
    (gone,) = state.apply(7, 14 * S, claim("d", 0, 3))
    assert isinstance(gone, Acquired)
    assert gone.offsets == ((1, 3, False), (2, 3, True))  # 2: max_deliveries reached


def test_the_reason_of_a_reject_survives_the_lease() -> None:
    """Rejected just before the deadline: the next holder writes the dead letter, and the
    state tells it the reason is ``rejected`` (count 1)."""
    state = ShareState(G)
    state.apply(0, 10 * S, claim("a", 0, 1))
    state.apply(1, 11 * S + S // 2, settle("a", 0, 0, rejected=((0, 1),), dlq_hw=3))
    (won,) = state.apply(2, 12 * S, claim("b", 0, 1))
    assert isinstance(won, Acquired)
    assert won.offsets == ((0, 1, True),)
    r = state.partition("s", 0).ranges[0]
    assert r.reasons == {0: "rejected"}
    # ... and the member's hand-out says so.
    member = ShareMember(ShareConfig(G, "b", (("s", 0),), ack_deadline=1.0))
    for q, (t, record) in enumerate(
        [
            (10 * S, claim("a", 0, 1)),
            (11 * S + S // 2, settle("a", 0, 0, rejected=((0, 1),), dlq_hw=3)),
            (12 * S, claim("b", 0, 1)),
        ]
    ):
        member.on_record(q, t, encode_share_record(record))
    member.on_appended(12.0, 12 * S, 12.001)
    (letter,) = member.take_dead(12.01)
    assert (letter.reason, letter.delivery_count, letter.dlq_from) == ("rejected", 1, 3)


def test_version_1_records_are_still_read() -> None:
    raw = (
        b'{"v":1,"type":"claim","group":"g","member":"a","stream":"s","partition":0,'
        b'"start":null,"end":5,"size":5,"lease_ms":1000,"max_deliveries":3,"dlq_hw":null}'
    )
    state = ShareState(G)
    (won,) = state.apply_bytes(0, S, raw)
    assert isinstance(won, Acquired)


def test_a_member_is_told_of_its_late_ack() -> None:
    """a's ack arrives after b claimed the range: the member reports it as lost."""
    member = ShareMember(ShareConfig(G, "a", (("s", 0),), ack_deadline=1.0))
    records = [
        (10 * S, claim("a", 0, 2)),
        (12 * S, claim("b", 0, 2)),
        (12 * S, settle("a", 0, 0, acked=((0, 1),), released=((1, 0),))),
    ]
    for q, (t, record) in enumerate(records):
        member.on_record(q, t, encode_share_record(record))
    assert member.lost == [LostOutcome("s", 0, 0, "ack"), LostOutcome("s", 0, 1, "nack")]


def test_group_settings_win_over_the_claim() -> None:
    state = ShareState(G)
    state.apply(0, S, Settings(G, "admin", 2000, 1))
    (won,) = state.apply(1, 10 * S, claim("a", 0, 1, lease_ms=60_000, maxd=9))
    assert isinstance(won, Acquired)
    assert won.deadline == 12 * S
    state.apply(2, 10 * S, settle("a", 0, 1, released=((0, 0),)))
    (again,) = state.apply(3, 10 * S, claim("b", 0, 1, maxd=9))
    assert isinstance(again, Acquired)
    assert again.offsets == ((0, 1, True),)  # the group's limit of 1 was reached
    raw = encode_share_record(Settings(G, "admin", 2000, 1))
    assert decode_share_record(raw) == Settings(G, "admin", 2000, 1)


def test_rate_meter() -> None:
    """Starting, the application is not busy; it takes 10 per busy second; stuck, its rate
    falls towards zero; a wait is not busy time."""
    meter = RateMeter(tau=1.0)
    meter.waiting(0.0)
    meter.done_waiting(5.0, 0)  # nothing yet: 5 s of starting are not busy time
    assert meter.rate(5.0) is None
    t = 5.0
    for _ in range(50):
        meter.waiting(t)
        meter.done_waiting(t, 1)
        t += 0.1
    rate = meter.rate(t)
    assert rate is not None
    assert 9.0 < rate < 11.0
    stuck = meter.rate(t + 5.0)
    assert stuck is not None
    assert stuck < 0.1
    meter.waiting(t + 5.0)
    later = meter.rate(t + 5.5)  # waiting: neither busy nor handing out, the rate stays
    assert later == pytest.approx(stuck)


def test_any_available_shortcuts_agree_with_the_scan() -> None:
    state = ShareState(G)
    state.apply(0, 10 * S, claim("a", 0, 4))
    r = state.partition("s", 0).ranges[0]

    def scan(t: int) -> bool:
        return any(r.available(i, t) for i in range(4))

    checks = [10 * S, 11 * S, 11 * S + 1]
    for t in checks:
        assert r.any_available(t) == scan(t)
    state.apply(1, 10 * S, settle("a", 0, 0, released=((1, 12 * S),), renew=((2, 3),)))
    state.apply(2, 10 * S, settle("a", 0, 0, returned=((3, 4),)))
    for t in [*checks, 12 * S, 12 * S + 1]:
        assert r.any_available(t) == scan(t), t


class _OffsetByOffset(ShareState):
    """The state machine without the run-at-once ack path (the reference it must equal)."""

    @staticmethod
    def _ack_run(*_args: object) -> bool:
        return False


@pytest.mark.parametrize("seed", range(8))
def test_acks_by_run_equal_acks_offset_by_offset(seed: int) -> None:
    """Settles whose acked runs are all the writer's go through ShareState._ack_run in slice
    operations; random claims, settles (acks of offsets held, not held, renewed, released,
    after the deadline) leave the same state and changes as the offset-by-offset path."""
    import random

    rng = random.Random(seed)
    fast, slow = ShareState(G), _OffsetByOffset(G)
    members = ["a", "b", "c"]
    won: list[tuple[str, int, int, int]] = []  # (member, range start, lease, range end)
    t = 0
    for q in range(400):
        t += rng.choice([1, 10, 300]) * 1_000_000
        m = rng.choice(members)
        record: Claim | Settle
        if not won or rng.random() < 0.35:
            ranges = [(s, e) for _, s, _, e in won]
            if ranges and rng.random() < 0.5:
                start, end = rng.choice(ranges)
            else:
                start = fast.partition("s", 0).speo
                end = start + rng.randint(1, 40)
            record = claim(m, start, end, lease_ms=rng.choice([50, 1000]))
        else:
            m, start, lease, end = rng.choice(won)
            a = rng.randint(start - 3, end)
            runs = ((a, min(end + 2, a + rng.randint(1, 30))),)
            kind = rng.random()
            if kind < 0.7:
                record = settle(m, start, lease, acked=runs)
            elif kind < 0.85:
                record = settle(m, start, lease, renew=runs)
            else:
                record = settle(m, start, lease, released=((a, 0),), acked=runs[1:])
        got = fast.apply(q, t, record)
        assert got == slow.apply(q, t, record)
        for change in got:
            if isinstance(change, Acquired):
                r = fast.partition("s", 0).ranges[change.start]
                won.append((change.member, change.start, change.lease, r.end))
        assert fast.snapshot() == slow.snapshot()
    assert fast.partition("s", 0).acked_total > 100


def test_a_settle_leaves_out_what_is_empty() -> None:
    """Spec §3.2: empty lists, extend false and dlq_hw null are not written (an acks-only
    settle is about 80 bytes shorter), and read back as such."""
    record = settle("a", 0, 1, acked=((0, 5), (6, 9)))
    raw = encode_share_record(record)
    assert raw == (
        b'{"v":2,"type":"settle","group":"g","member":"a","stream":"s","partition":0,'
        b'"start":0,"lease":1,"acked":[[0,5],[6,9]]}'
    )
    assert decode_share_record(raw) == record
    full = settle("a", 0, 1, rejected=((1, 2),), extend=True, dlq_hw=4, renew=((3, 4),))
    assert decode_share_record(encode_share_record(full)) == full


def test_the_share_records_errors_are_jet_errors_and_value_errors() -> None:
    # One root for every SDK error (issue 37 item 3): ``except JetError`` catches them, and
    # callers that caught ValueError still do.
    for raw, error in [
        (b"[]", InvalidShareRecord),
        (b'{"v":3,"type":"claim"}', UnsupportedShareVersion),
    ]:
        with pytest.raises(error) as caught:
            decode_share_record(raw)
        assert isinstance(caught.value, JetError)
        assert isinstance(caught.value, ValueError)
        assert not caught.value.retriable
        assert pickle.loads(pickle.dumps(caught.value)).args == caught.value.args
