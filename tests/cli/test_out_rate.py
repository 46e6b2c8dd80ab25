"""The out msg/s of jet top and jet console (issue 35: "a sawtooth", 0 most seconds and
then 1,500-2,300 while the real rate was 300-500): groups commit every few seconds, and the
rate shown is that of their last commit step, steady between commits."""

from __future__ import annotations

from jetserver.observe.rates import StepRate


def test_commits_every_five_seconds_read_as_a_steady_rate() -> None:
    rates = StepRate()
    shown = []
    # 400 msg/s consumed; the group commits every 5 s; sampled every second for 40 s.
    for t in range(41):
        committed = 400 * (t - t % 5)
        shown.append(rates.rate("p", committed, float(t)))
    assert shown[:10] == [None] * 10  # the duration of a step is known from the 2nd commit
    steady = shown[10:]
    assert all(r is not None and abs(r - 400.0) < 1e-9 for r in steady), steady
    # What a per-sample difference showed: zeros and 2,000s.
    naive = {400 * (t + 1 - (t + 1) % 5) - 400 * (t - t % 5) for t in range(40)}
    assert naive == {0, 2000}


def test_it_decays_once_commits_stop_and_restarts_after_a_reset() -> None:
    rates = StepRate()
    for t, c in ((0, 0), (5, 2000), (10, 4000)):
        rates.rate("p", c, float(t))
    assert rates.rate("p", 4000, 14.0) == 400.0  # the next commit is not due yet
    assert rates.rate("p", 4000, 20.0) == 200.0  # overdue: 2,000 over the 10 s since
    assert rates.rate("p", 4000, 110.0) == 20.0
    assert rates.rate("p", 10, 111.0) is None  # offsets reset backwards: start again
    rates.forget(set())
    assert rates.rate("p", 10, 112.0) is None
