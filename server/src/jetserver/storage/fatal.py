"""Stopping the server at once when carrying on could break a promise already made.

A failed fsync of the Raft journal or of a metadata file means that a vote, a term or an
entry this server may already have acknowledged to its peers might not be on disk (Linux
drops the dirty pages of a failed writeback and reports the error once, so no retry can
make them durable). Raft's safety rests on exactly those writes, so the server does what
PostgreSQL does after a failed fsync: it logs why and exits at once, without running any
cleanup that could write more state. A restart recovers from what is on disk, as after a
crash, and rejoins the cluster.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from jetserver.storage import files as storage_files

log = logging.getLogger(__name__)

EXIT_STORAGE_FATAL = 74
"""Exit status after a fatal storage error (EX_IOERR of sysexits.h)."""


def die(what: str, exc: BaseException) -> None:
    """Log ``what`` failed with ``exc`` as CRITICAL, then exit the process at once."""
    message = (
        f"FATAL: {what} failed ({exc}); stopping now: carrying on could lose state this "
        "server already acknowledged. Check the disk, then restart the server: it recovers "
        "from what is on disk."
    )
    try:
        log.critical(message)
        for handler in logging.getLogger().handlers:
            handler.flush()
        print(message, file=sys.stderr, flush=True)
    finally:
        os._exit(EXIT_STORAGE_FATAL)


def fsync_or_die(fd: int, what: str, *, data_only: bool = False) -> None:
    """fsync (or fdatasync) ``fd``; on failure stop the server via :func:`die`.

    Goes through :mod:`jetserver.storage.files`, so a power-loss test's durability trace
    sees the Raft journal and the metadata files too."""
    try:
        if data_only:
            storage_files.fdatasync(fd)
        else:
            storage_files.fsync(fd)
    except OSError as exc:
        die(f"fsync of {what}", exc)


def fsync_directory_or_die(directory: Path, what: str) -> None:
    """fsync ``directory`` (make creations and renames in it durable), or stop."""
    try:
        storage_files.fsync_directory(directory)
    except OSError as exc:
        die(f"fsync of {what}", exc)
