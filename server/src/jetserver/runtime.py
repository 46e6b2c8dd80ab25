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
"""

from __future__ import annotations

import asyncio
import gc

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
