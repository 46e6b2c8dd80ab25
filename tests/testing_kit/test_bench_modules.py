"""Every module of ``bench/`` (``python -m bench NAME``) imports: a helper moved or renamed
elsewhere must not leave a benchmark that fails only when someone runs it (after a shared
percentile moved to ``bench/stats.py``, ``bench light`` and ``bench cost`` no longer
started, and no test saw it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT_BOUND_S = 120.0


def test_every_bench_module_imports() -> None:
    names = sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__main__")
    assert "bench_light" in names
    assert "stats" in names
    code = "import importlib\n" + "".join(
        f"importlib.import_module('bench.{name}')\n" for name in names
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=IMPORT_BOUND_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
