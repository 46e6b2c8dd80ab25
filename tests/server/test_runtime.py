"""Process-wide runtime settings (checked in a child process: they are process-wide)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from jetserver.infra.runtime import GC_GEN0_THRESHOLD


def test_tune_gc_freezes_and_raises_the_young_threshold() -> None:
    code = (
        "import gc; from jetserver.infra.runtime import tune_gc; tune_gc(); "
        "print(gc.get_threshold()[0], gc.get_freeze_count() > 0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == [str(GC_GEN0_THRESHOLD), "True"]


_BUFFER_ROUNDS = """
import resource, sys
from jetserver.infra.runtime import tune_malloc
tuned = tune_malloc() if sys.argv[1] == "tune" else False
src = bytes(1 << 20)
def rounds(n):
    for _ in range(n):  # eight request-sized buffers alive at once, then all freed
        held = [b"".join((src, b"x")) for _ in range(8)]
        del held
rounds(3)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
rounds(20)
print(tuned, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 20)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
def test_tune_malloc_keeps_freed_buffers_for_reuse() -> None:
    """Without it, glibc gives 8 MiB of freed 1 MiB buffers back to the system and every
    page of the next ones faults again (2,016 faults a round on the dev VM); with it, the
    buffers are reused."""

    def faults_per_round(mode: str) -> tuple[str, int]:
        out = subprocess.run(
            [sys.executable, "-c", _BUFFER_ROUNDS, mode],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"},
        )
        tuned, faults = out.stdout.split()
        return tuned, int(faults)

    pages = 8 * (1 << 20) // 4096
    tuned, faults = faults_per_round("plain")
    assert tuned == "False"
    assert faults > pages // 2  # what the server paid before
    tuned, faults = faults_per_round("tune")
    assert tuned == "True"
    assert faults < pages // 20
