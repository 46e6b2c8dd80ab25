"""Process-wide runtime settings (checked in a child process: they are process-wide)."""

from __future__ import annotations

import subprocess
import sys

from jetserver.runtime import GC_GEN0_THRESHOLD


def test_tune_gc_freezes_and_raises_the_young_threshold() -> None:
    code = (
        "import gc; from jetserver.runtime import tune_gc; tune_gc(); "
        "print(gc.get_threshold()[0], gc.get_freeze_count() > 0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == [str(GC_GEN0_THRESHOLD), "True"]
