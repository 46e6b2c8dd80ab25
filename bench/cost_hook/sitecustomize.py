"""Loaded by ``bench cost`` and ``bench tail`` into their jet server processes (through
PYTHONPATH). When ``JET_COST_PROFILE`` names a file: SIGUSR1 starts a cProfile of the main
(event-loop) thread, SIGUSR2 stops it and writes the stats to that file. If a file of that
name plus ``.lines`` exists when SIGUSR1 comes, the main thread's Python lines run are
counted instead (``sys.settrace``, per function) and SIGUSR2 writes them to that file as
JSON (``{"<file>:<first line>(<function>)": lines}``); with ``JET_COST_BYLINE=<dir>`` the
count of every line run is written there too (``<profile file name>.json``,
``{"<file>:<line>": runs}``). When ``JET_LOOP_PROBE`` names a file: :mod:`bench.loop_probe`
times every asyncio loop callback's CPU and writes them there at exit. Nothing else
changes."""

from __future__ import annotations

import os

_PATH = os.environ.get("JET_COST_PROFILE", "")

if _PATH:
    import cProfile
    import json
    import signal
    import sys
    from collections import Counter
    from types import CodeType, FrameType
    from typing import Any

    _profile: list[cProfile.Profile] = []
    _lines: list[Counter[CodeType]] = []
    _BYLINE = os.environ.get("JET_COST_BYLINE", "")
    _by_line: Counter[tuple[str, int]] = Counter()

    def _count_lines() -> None:
        counts: Counter[CodeType] = Counter()

        def local(frame: FrameType, event: str, _arg: Any) -> Any:
            if event == "line":
                counts[frame.f_code] += 1
                if _BYLINE:
                    _by_line[frame.f_code.co_filename, frame.f_lineno] += 1
            return local

        def called(frame: FrameType, event: str, _arg: Any) -> Any:
            return local if event == "call" else None

        _lines.append(counts)
        sys.settrace(called)

    def _start(_signum: int, _frame: Any) -> None:
        if _profile or _lines:
            return
        if os.path.exists(_PATH + ".lines"):
            _count_lines()
            return
        _profile.append(cProfile.Profile())
        _profile[0].enable()

    def _stop(_signum: int, _frame: Any) -> None:
        if _lines:
            sys.settrace(None)
            counts = _lines.pop()
            out = {f"{c.co_filename}:{c.co_firstlineno}({c.co_name})": n for c, n in counts.items()}
            with open(_PATH + ".tmp", "w") as f:
                json.dump(out, f)
            os.replace(_PATH + ".tmp", _PATH)  # whole when seen
            if _BYLINE:
                name = os.path.join(_BYLINE, os.path.basename(_PATH) + ".json")
                with open(name, "w") as f:
                    json.dump({f"{path}:{line}": n for (path, line), n in _by_line.items()}, f)
                _by_line.clear()
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
