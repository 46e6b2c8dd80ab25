"""The long-lived objects of a Spark Python worker, kept out of its per-task collection.

A reused Python worker (``spark.python.worker.reuse``, Spark's default) runs a full
``gc.collect()`` after every task (``pyspark.daemon``), and a full collection walks every
container object the process holds: pyspark's, and, once a task has read or written a
stream, pyarrow's, numpy's, the SDK client's and the connection bridge's (about 51,000
objects, 40 ms of CPU a collection at load 19). At 16 KiB values that was about a fifth of
the workers' CPU in a source query (perf, ``gc_collect_main`` and its visitors).

Each code path (the source's read, a sink task's write) calls :func:`freeze_worker_heap` once
it has done its work's first part, when everything it imports lazily is imported (the first
``take`` imports ``pyarrow.compute``: 16,000 objects): the objects the process then holds
move to the permanent generation (``gc.freeze``, as pre-fork servers do), once per process
and path, and later collections walk only what tasks create after it. Only inside a Spark
task (``TaskContext.get()``), never in a driver or in the streaming source's runner, whose
heaps are the user's.

What this costs: a reference cycle already unreachable when the heap is frozen is never
freed (the daemon collected after the previous task, so that is what the current task made
since: its deserialized command and first batch, at most twice per process).
"""

from __future__ import annotations

import gc
import os

__all__ = ["freeze_worker_heap"]

_frozen: set[tuple[int, str]] = set()
"""(pid, path) of the freezes done (a forked child freezes its own)."""


def freeze_worker_heap(path: str) -> bool:
    """Inside a Spark task, the first call for ``path`` in this process freezes the heap;
    True if it did."""
    key = (os.getpid(), path)
    if key in _frozen:
        return False
    from pyspark.taskcontext import TaskContext

    if TaskContext.get() is None:
        return False
    _frozen.add(key)
    gc.freeze()
    return True
