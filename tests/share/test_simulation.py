"""Seeded simulations of share groups (jetsdk.share.simulation), spec/share-groups.md §9.

A failure names its seed; replay it with
``python -c "from jetsdk.share.simulation import run; print(run(SEED))"``.
Mutations of the real code (a member ignoring its deadline, a state that lets a claim take a
held range, a count raised by lost claims) must be caught by the same checks.
"""

from __future__ import annotations

import pytest

from jetsdk.share import member as member_mod
from jetsdk.share import state as state_mod
from jetsdk.share.simulation import InvariantViolation, SimConfig, Simulation, run

VARIANTS = {
    "lossy-slow": SimConfig(drop_rate=0.1, ack_loss_rate=0.1, slow_append_rate=0.1),
    "many-members-one-partition": SimConfig(members=7, partitions=1, messages=200),
    "crashy": SimConfig(crash_rate=0.5, pause_rate=0.3, max_deliveries=2),
    "group-settings": SimConfig(group_settings=True, crash_rate=0.3),
    "everyone-crashes": SimConfig(
        crash_all_at=1.0, trickle=False, crash_rate=0.0, pause_rate=0.0, concurrency=1
    ),
}


@pytest.mark.parametrize("seed", range(20))
def test_default(seed: int) -> None:
    result = run(seed)
    assert result.acked + result.dead == 300
    assert result.dead >= 6  # the poison offsets at least


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("seed", range(100, 103))
def test_variants(name: str, seed: int) -> None:
    run(seed, VARIANTS[name])


def test_faults_happen() -> None:
    """The default runs do inject the faults the properties are about."""
    results = [run(seed) for seed in range(4)]
    assert sum(r.crashes for r in results) > 0
    assert sum(r.pauses for r in results) > 0
    assert all(r.handouts > r.acked + r.dead for r in results)  # redeliveries happened


def test_same_seed_same_run() -> None:
    assert run(7) == run(7)


def _violates(seed_range: range, config: SimConfig | None = None) -> bool:
    for seed in seed_range:
        try:
            Simulation(seed, config).run()
        except InvariantViolation:
            return True
    return False


def test_mutation_ignoring_the_deadline_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(member_mod.ShareMember, "_in_time", lambda self, h, now: True)
    # Pacing gives back what cannot be handed out before the stop point; ignore it too.
    monkeypatch.setattr(member_mod.ShareMember, "_pace", lambda self, now: None)
    assert _violates(range(5))


def test_mutation_claiming_a_held_offset_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = state_mod.Range.available

    def held_too(self, i, t):  # type: ignore[no-untyped-def]
        return self.states[i] == state_mod.ACQUIRED or real(self, i, t)

    monkeypatch.setattr(state_mod.Range, "available", held_too)
    assert _violates(range(5))


def test_mutation_counting_lost_claims_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = state_mod.ShareState._claim

    def counting(self, ps, q, t, c):  # type: ignore[no-untyped-def]
        change = real(self, ps, q, t, c)
        if isinstance(change, state_mod.ClaimLost):
            r = ps.ranges.get(c.start)
            if r is not None:
                r.counts[0] += 1
        return change

    monkeypatch.setattr(state_mod.ShareState, "_claim", counting)
    assert _violates(range(5))


def test_mutation_writing_dead_letters_without_looking_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claims that say the dead-letter stream ends later than it does (so a new holder does not
    see its predecessor's dead letter) must show up as duplicates."""
    real = member_mod.ShareMember.claims

    def late(self, now, hws, *, dlq_hw=None, wall_ns=None):  # type: ignore[no-untyped-def]
        later = None if dlq_hw is None else dlq_hw + 1000
        return real(self, now, hws, dlq_hw=later, wall_ns=wall_ns)

    monkeypatch.setattr(member_mod.ShareMember, "claims", late)
    assert _violates(range(10), SimConfig(crash_rate=0.5, pause_rate=0.5))


# -- pacing and the delivery count (spec §5 "Pacing", §7) ---------------------------------

STUCK = SimConfig.fault_free(
    members=3, messages=120, concurrency=1, batch=40, stuck_rate=0.03, stuck_time=2.5
)
"""An application that now and then is stuck on one message for 2.5 leases (no in_progress):
what it acquired and never saw must come back uncounted."""
SLOW = SimConfig.fault_free(
    members=3, messages=150, concurrency=1, batch=100, task_time=(0.04, 0.08), settle_time=40.0
)
"""A healthy but slow consumer (about 17 messages per second against a 1 s lease, ranges of up
to 100): it must acquire only what it can be handed before the lease runs out."""


@pytest.mark.parametrize("seed", range(200, 204))
def test_stuck_application_burns_no_deliveries(seed: int) -> None:
    result = run(seed, STUCK)
    assert result.returned > 0  # the stuck member gave back what it had not handed out


@pytest.mark.parametrize("seed", range(300, 303))
def test_slow_consumer_burns_no_deliveries(seed: int) -> None:
    result = run(seed, SLOW)
    assert result.dead >= 6  # the poison offsets (at max_deliveries) and the rejected ones


def test_strict_check_with_faults_would_fail() -> None:
    """The strict rule is a real check: with crashes (whose acquisitions are counted, spec §7)
    it fails."""
    config = SimConfig(strict=True, crash_rate=0.5)
    assert _violates(range(3), config)


def test_mutation_dropping_instead_of_returning_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old behaviour: waiting offsets past the stop point dropped (not returned) and a
    fixed prefetch regardless of the application's rate."""

    def drop(self, h, keep):  # type: ignore[no-untyped-def]
        del h.waiting[keep:]

    monkeypatch.setattr(member_mod.ShareMember, "_give_back", drop)
    monkeypatch.setattr(member_mod.ShareMember, "_pace", lambda self, now: None)
    monkeypatch.setattr(member_mod.ShareMember, "capacity", lambda self, now: self.config.batch * 4)
    assert _violates(range(200, 203), STUCK)
    assert _violates(range(300, 302), SLOW)
