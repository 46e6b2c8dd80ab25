"""A real tmpfs for disk-full tests: mount one (needs root; the test is skipped with the
reason otherwise), read its free space, and fill it to the last byte from outside jet."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

FILLER_CHUNKS = (1 << 16, 1 << 12, 1 << 9, 1)
"""Write sizes of :func:`fill_rest`, largest first (down to one byte)."""
MAX_WRITES_PER_CHUNK = 1 << 16


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """A command, bounded, its output captured."""
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=False)


def mount_tmpfs(mnt: Path, size: str) -> None:
    """Mount a tmpfs of ``size`` (``4m``) at ``mnt`` (created); skip the test if it cannot."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    mnt.mkdir(parents=True, exist_ok=True)
    done = run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")


def unmount(mnt: Path) -> None:
    """Unmount ``mnt`` (lazily: a file still open does not stop it)."""
    run("umount", "-l", str(mnt))


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_rest(path: Path) -> int:
    """Write ``path`` until the file system holding it has no byte left; bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in FILLER_CHUNKS:
            block = b"f" * chunk
            for _ in range(MAX_WRITES_PER_CHUNK):
                try:
                    written += os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return written
