"""Loaded by ``bench cost`` into its jet server processes (through PYTHONPATH) when
``JET_COST_PROFILE`` names a file: SIGUSR1 starts a cProfile of the main (event-loop)
thread, SIGUSR2 stops it and writes the stats to that file. Nothing else changes."""

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
