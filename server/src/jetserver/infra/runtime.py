"""Process-wide runtime settings of a ``jet server`` process.

The garbage collector: ingest and Produce allocate a few short-lived tuples and byte strings
per message. With CPython's default threshold (700 net container allocations) a batch of a
thousand in-flight messages triggers young collections all the time, promotes live batches
to older generations and leads to full collections that paused the server for 60-190 ms
under the sdk benchmark (about 3 us of CPU per message in total). A higher young threshold
lets those objects die young; collections still run when garbage really accumulates
(cycles count against the threshold until collected, so at most ~GC_GEN0_THRESHOLD
objects of cyclic garbage wait). Objects created before serving (imports, configuration)
are frozen so full collections skip them.

The allocator (glibc): a request, a frame or a batch of records is a buffer of up to a few
MiB that lives for one request. glibc gives such buffers back to the system when they are
freed (a mapping of their own from 128 KiB, or a trim of the heap's top beyond twice that,
its thresholds adapting only to the largest single buffer), so the next one starts on
fresh pages: one page fault per 4 KiB of every payload, the server's largest CPU cost after
the kernel's own copy at 1 MiB messages (issue 39: 219-390 faults per MiB published,
``python -m bench.profile_bytes --processes 1``). Fixed thresholds keep freed buffers for
reuse; the price is up to MALLOC_TRIM_THRESHOLD_BYTES of freed memory kept.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import platform

from jetserver.errors import ConfigError

GC_GEN0_THRESHOLD = 20_000
"""Net container allocations between young-generation collections (CPython default 700)."""


def tune_gc() -> None:
    """Freeze the objects created so far and raise the young-generation threshold.

    Call once, at server start (not in tests or library code).
    """
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, middle, old)


MALLOC_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
"""Buffers from this size get a mapping of their own, unmapped when freed (glibc's largest
allowed value; its default starts at 128 KiB)."""
MALLOC_TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024
"""Free memory at the top of the heap beyond which glibc gives it back to the system."""
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def tune_malloc() -> bool:
    """Have glibc keep freed large buffers for reuse (module docstring): True if set.

    Nothing is changed on another C library, or when ``GLIBC_TUNABLES`` sets malloc
    options (the operator's choice). Call once, at server start (not in library code).
    """
    if platform.libc_ver()[0] != "glibc" or "malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD_BYTES)
    )


def uses_uvloop(choice: str) -> bool:
    """Whether ``jet server`` runs on uvloop for ``[server] event_loop`` = ``choice``.

    Raises:
        ConfigError: ``uvloop`` was asked for and is not installed.
    """
    if choice == "asyncio":
        return False
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise ConfigError("event_loop = 'uvloop' but uvloop is not installed") from None
        return False
    return True


def event_loop_name() -> str:
    """``uvloop`` or ``asyncio``: the event loop running the caller."""
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]
