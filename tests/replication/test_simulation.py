"""The seeded replication simulation over many seeds (issue 4 item 8).

Each test runs whole scenarios (about 10 virtual seconds each: faults for 6 s, then
everything healed and settled); a failure names the seed and the last faults, and
``run_seed(seed, cfg)`` replays it exactly.
"""

from __future__ import annotations

from typing import Any

import pytest

from jetserver.replication import Truncation, epochs

from . import sim_replica
from .invariants import InvariantViolation
from .simulation import SimConfig, run_seed

FLUSHED = SimConfig()
RF5 = SimConfig(replicas=5, min_isr=3)
RF2 = SimConfig(replicas=2, min_isr=1)
LOSSY = SimConfig(loss=0.15, faults_per_s=3.0)
# Replication-only durability survives process crashes, not the loss of unflushed data
# on a follower (spec/cluster.md "Durability"): no power loss here.
REPLICATED = SimConfig(durability="replicated", power_loss=False)


@pytest.mark.parametrize("seed", range(40))
def test_flushed_durability_with_crashes_power_loss_partitions_and_pauses(seed: int) -> None:
    sim = run_seed(seed, FLUSHED)
    assert sim.checker.checks > 0


@pytest.mark.parametrize("seed", range(100, 110))
def test_five_replicas(seed: int) -> None:
    run_seed(seed, RF5)


@pytest.mark.parametrize("seed", range(200, 220))
def test_two_replicas(seed: int) -> None:
    run_seed(seed, RF2)


@pytest.mark.parametrize("seed", range(300, 320))
def test_lossy_network_and_frequent_faults(seed: int) -> None:
    run_seed(seed, LOSSY)


@pytest.mark.parametrize("seed", range(400, 415))
def test_replicated_durability_with_process_crashes(seed: int) -> None:
    run_seed(seed, REPLICATED)


def test_runs_are_not_vacuous() -> None:
    acked = elections = truncated_runs = 0
    for seed in range(10):
        sim = run_seed(seed, FLUSHED)
        acked += len(sim.checker.acked)
        elections += sim.ctl.epoch
        truncated_runs += any("crash" in f for f in sim.faults)
    assert acked > 1000
    assert elections > 5
    assert truncated_runs > 3


def test_same_seed_same_run() -> None:
    a, b = run_seed(7, FLUSHED), run_seed(7, FLUSHED)
    assert (a.events, a.checker.acked, a.faults) == (b.events, b.checker.acked, b.faults)
    assert [n.records for n in a.nodes.values()] == [n.records for n in b.nodes.values()]


def test_the_checkers_catch_a_wrong_truncation_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: the first version of the KIP-101 rule truncated to the leader's end
    offset without the follower's own end of that epoch; the simulation must catch it."""

    def wrong(**kw: Any) -> Truncation:
        follower_epoch, follower_end = kw["local_epoch_end"](kw["leader_epoch"])
        if kw["leader_epoch"] == -1 or follower_epoch == -1:
            return Truncation(min(kw["local_hw"], kw["local_leo"]), True)
        if follower_epoch != kw["leader_epoch"]:
            return Truncation(min(follower_end, kw["local_leo"]), False)
        return Truncation(min(kw["leader_end_offset"], kw["local_leo"]), True)

    monkeypatch.setattr(sim_replica, "truncation_point", wrong)
    assert epochs.truncation_point is not wrong
    caught: BaseException | None = None
    for seed in range(40):
        try:
            run_seed(seed, FLUSHED)
        except AssertionError as exc:
            caught = exc.__cause__
            break
    assert isinstance(caught, InvariantViolation)
