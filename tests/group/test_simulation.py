"""Seeded simulations of whole groups (jetsdk.group.simulation), checked by jetsdk.group.invariants.

A failure names its seed (in the test id and the message); replay it with
``python -c "from jetsdk.group.simulation import run; run(SEED)"``.
"""

from __future__ import annotations

import os

import pytest

from jetsdk.group.invariants import InvariantViolation
from jetsdk.group.member import GroupMember, _Status
from jetsdk.group.simulation import SimConfig, Simulation, run
from jetsdk.group.stream_partition import StreamPartition

VARIANTS = {
    "heterogeneous-range": SimConfig(heterogeneous=True, assignor="range"),
    "static-roundrobin": SimConfig(assignor="roundrobin", static_fraction=1.0),
    "dynamic-6": SimConfig(members=6, static_fraction=0.0),
    "lossy-slow-log": SimConfig(
        drop_rate=0.1, ack_loss_rate=0.1, max_append_delay=0.1, max_read_delay=0.1
    ),
}


@pytest.mark.parametrize("seed", range(200))
def test_default_group(seed: int) -> None:
    result = run(seed)
    assert result.processed == result.produced


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("seed", range(1000, 1005))
def test_variants(name: str, seed: int) -> None:
    run(seed, VARIANTS[name])


def test_same_seed_same_run() -> None:
    first, second = Simulation(7, SimConfig()), Simulation(7, SimConfig())
    assert first.run() == second.run()
    assert first.values == second.values
    assert first.stamps == second.stamps


def test_runs_exercise_the_faults() -> None:
    results = [run(seed) for seed in range(10)]
    assert sum(r.faults for r in results) >= 20
    assert sum(r.expiries_checked for r in results) >= 5
    assert max(r.generations for r in results) >= 8
    assert min(r.commits for r in results) > 50


def _violations(seeds: range) -> int:
    messages = []
    for seed in seeds:
        try:
            run(seed)
        except InvariantViolation as exc:
            messages.append((seed, str(exc)))
    assert all(text.startswith(f"seed={seed}: ") for seed, text in messages)
    return len(messages)


def test_checks_catch_a_member_that_ignores_its_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_lease(self: GroupMember, partition: StreamPartition, now: float) -> bool:
        local = self._local.get(partition)
        return local is not None and local.status is not _Status.RELEASED

    monkeypatch.setattr(GroupMember, "may_process", no_lease)
    assert _violations(range(12)) >= 1


def test_checks_catch_a_handoff_without_release(monkeypatch: pytest.MonkeyPatch) -> None:
    from jetsdk.group.state import GroupState

    reconcile = GroupState._reconcile

    def eager(self: GroupState, changes: list[object]) -> None:
        for p in list(self._owners):
            target = self.target(p)
            if target is not None and target != self._owners[p].owner:
                del self._owners[p]  # give it away without waiting for the release
        reconcile(self, changes)  # type: ignore[arg-type]

    monkeypatch.setattr(GroupState, "_reconcile", eager)
    assert _violations(range(6)) >= 1


# Seeds per soak variant: 40 in the suite (~3 s each on a quiet core), more on request, e.g.
# JET_SOAK_SEEDS=500 pytest tests/group -k soak (a long soak is not a CI job).
SOAK_SEEDS = int(os.environ.get("JET_SOAK_SEEDS", "40"))


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", ["default", *sorted(VARIANTS)])
def test_soak(name: str) -> None:
    config = VARIANTS.get(name, SimConfig())
    failures = []
    for seed in range(10_000, 10_000 + SOAK_SEEDS):
        try:
            run(seed, config)
        except InvariantViolation as exc:
            failures.append(str(exc))
    assert not failures, failures[:5]
