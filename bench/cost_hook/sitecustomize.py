"""Loaded by ``bench cost`` and ``bench tail`` into their jet server processes (through
PYTHONPATH). When ``JET_COST_PROFILE`` names a file: SIGUSR1 starts a cProfile of the main
(event-loop) thread, SIGUSR2 stops it and writes the stats to that file. When
``JET_LOOP_PROBE`` names one: :mod:`bench.loop_probe` times every asyncio loop callback's
CPU and writes them there at exit. Nothing else changes."""

from __future__ import annotations

import os

_PATH = os.environ.get("JET_COST_PROFILE", "")

if _PATH:
    import cProfile
    import signal
    from typing import Any

    _profile: list[cProfile.Profile] = []

    def _start(_signum: int, _frame: Any) -> None:
        if not _profile:
            _profile.append(cProfile.Profile())
            _profile[0].enable()

    def _stop(_signum: int, _frame: Any) -> None:
        if _profile:
            prof = _profile.pop()
            prof.disable()
            prof.dump_stats(_PATH)

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)

if os.environ.get("JET_LOOP_PROBE", ""):
    # ``bench tail``: the CPU time of each loop callback (the server runs asyncio's loop).
    from bench import loop_probe

    loop_probe.install()
    loop_probe.dump_at_exit(os.environ["JET_LOOP_PROBE"])
