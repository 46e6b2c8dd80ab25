"""PySyncObj's log records, routed into ``jetserver.raft.pysyncobj`` with sensible levels.

PySyncObj logs through the ``pysyncobj`` logger (it has no print statements in 0.3.17).
Without a handler its warnings would reach Python's last-resort handler on stderr, outside
the server's log format. :func:`install` stops propagation of ``pysyncobj`` and re-emits
every record on ``jetserver.raft.pysyncobj``, so the server's handlers and level apply.
Levels are kept (PySyncObj warns only about real problems: a failed snapshot, a journal
truncated below the applied index, an exception in its loop, an unresolvable peer) except
the records listed in :data:`DEMOTED`, which are expected on a healthy cluster and go to
DEBUG.
"""

from __future__ import annotations

import logging
import threading

TARGET = "jetserver.raft.pysyncobj"
"""Logger PySyncObj's records are re-emitted on."""

DEMOTED: tuple[str, ...] = (
    # printStatus() dumps its status at INFO, one line per field.
    "version: ",
    "revision: ",
)
"""Message prefixes re-emitted at DEBUG."""

_lock = threading.Lock()


class _Forward(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger(TARGET + record.name[len("pysyncobj") :])
        message = record.getMessage()
        level = logging.DEBUG if message.startswith(DEMOTED) else record.levelno
        if not target.isEnabledFor(level):
            return
        clone = logging.makeLogRecord(record.__dict__)
        clone.name = target.name
        clone.levelno = level
        clone.levelname = logging.getLevelName(level)
        clone.msg, clone.args = message, None
        target.handle(clone)


def install() -> None:
    """Route the ``pysyncobj`` logger into :data:`TARGET` (idempotent, process-wide)."""
    with _lock:
        source = logging.getLogger("pysyncobj")
        if any(isinstance(h, _Forward) for h in source.handlers):
            return
        source.addHandler(_Forward())
        source.setLevel(logging.DEBUG)
        source.propagate = False
