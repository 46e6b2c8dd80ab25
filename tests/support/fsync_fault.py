"""Real fsync failures in a real process: an LD_PRELOAD shim over fsync/fdatasync.

The shim (``fsync_fault.c`` beside this file) makes the Nth sync of the files whose path
contains a given string fail with EIO, after truncating that file to its size at its last
good sync: the bytes written since then are gone, as after a failed writeback on Linux
(the kernel drops the dirty pages and reports the error once; the next fsync succeeds).

    env = FsyncFault(match="/orders/0/", at=5, marker=tmp / "fired").env()
    start_server_process(nats_url, data_dir, env=env)

It is compiled with the machine's C compiler once per test session into a temporary
directory (never committed). :func:`shim_path` raises :class:`ShimUnavailable` where no C
compiler is found; tests skip then, saying so.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import attrs

SOURCE = Path(__file__).with_name("fsync_fault.c")


class ShimUnavailable(RuntimeError):
    """The shim cannot be built here (no C compiler, or it failed)."""


@functools.cache
def shim_path() -> Path:
    """Build the shim (once per process) and return the shared library's path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise ShimUnavailable("no C compiler (cc/gcc) to build the fsync fault shim")
    out = Path(tempfile.mkdtemp(prefix="jet-fsync-fault-")) / "fsync_fault.so"
    result = subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SOURCE), "-ldl"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise ShimUnavailable(f"building the fsync fault shim failed: {result.stderr[-2000:]}")
    return out


@attrs.frozen
class FsyncFault:
    """One injected fsync failure: the ``at``-th sync of a file whose path has ``match``."""

    match: str
    """Substring of the watched files' paths (e.g. ``"/orders/0/0"`` for its segments)."""
    at: int
    """Which sync of the watched files fails (1-based)."""
    marker: Path | None = None
    """A file the shim creates when the fault fires (holds the path and the kept size)."""
    suffix: str = ""
    """If set, watched paths must also end with it (e.g. ``".log"``)."""

    def env(self) -> dict[str, str]:
        """Environment for the child process (merge into ``os.environ``)."""
        env = preload_env(self.marker, self.suffix)
        env["JET_FSYNC_FAULT_MATCH"] = self.match
        env["JET_FSYNC_FAULT_AT"] = str(self.at)
        return env


def preload_env(marker: Path | None = None, suffix: str = "") -> dict[str, str]:
    """LD_PRELOAD of the shim, with no fault armed (see :class:`ArmableFault`)."""
    preload = str(shim_path())
    old = os.environ.get("LD_PRELOAD")
    env = {"LD_PRELOAD": f"{preload} {old}" if old else preload}
    if marker is not None:
        env["JET_FSYNC_FAULT_FILE"] = str(marker)
    if suffix:
        env["JET_FSYNC_FAULT_SUFFIX"] = suffix
    return env


@attrs.frozen
class ArmableFault:
    """A fault armed while the process runs, through a control file the shim reads at
    every sync (for a server whose role is known only after it started)."""

    control: Path
    """The control file (absent: no fault)."""
    marker: Path
    """Created by the shim when the fault fires."""
    suffix: str = ".log"
    """Watched paths must end with it."""

    def env(self) -> dict[str, str]:
        """Environment for the child process (merge into ``os.environ``)."""
        env = preload_env(self.marker, self.suffix)
        env["JET_FSYNC_FAULT_CONTROL"] = str(self.control)
        return env

    def arm(self, match: str, at: int) -> None:
        """From now on, the ``at``-th sync of a file whose path has ``match`` fails."""
        self.marker.unlink(missing_ok=True)
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(f"{match}\n{at}\n")
        tmp.replace(self.control)

    @property
    def fired(self) -> bool:
        """True once the armed fault fired."""
        return self.marker.exists()


@attrs.frozen
class FsyncGate:
    """Holds the syncs of the watched files open while the gate file exists (the shim
    polls it), so a test can see what happens before an fsync ends."""

    gate: Path
    """The gate file: present = closed."""
    match: str
    """Substring of the watched files' paths."""
    suffix: str = ".log"
    """Watched paths must end with it."""

    def env(self) -> dict[str, str]:
        """Environment for the child process (merge into ``os.environ``)."""
        env = preload_env(None, self.suffix)
        env["JET_FSYNC_FAULT_MATCH"] = self.match
        env["JET_FSYNC_FAULT_AT"] = "0"
        env["JET_FSYNC_GATE"] = str(self.gate)
        return env

    def close(self) -> None:
        """From now on, syncs of watched files wait."""
        self.blocked.unlink(missing_ok=True)
        self.gate.touch()

    def open(self) -> None:
        """Let the waiting syncs go."""
        self.gate.unlink(missing_ok=True)

    @property
    def blocked(self) -> Path:
        """Created by the shim when a sync starts waiting at the closed gate."""
        return self.gate.with_name(self.gate.name + ".blocked")
