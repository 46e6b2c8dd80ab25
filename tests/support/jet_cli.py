"""Run the `jet` command as a subprocess against a `jet dev` (JET_SERVERS set from it)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Protocol

TIMEOUT_S = 120


class Servers(Protocol):
    """Anything with the servers' addresses (a `jet dev`, a test's cluster view)."""

    servers: list[str]


def jet_env(dev: Servers | None) -> dict[str, str]:
    """The environment for `jet`: JET_SERVERS from ``dev`` (unset without one)."""
    env = dict(os.environ)
    env.pop("JET_SERVERS", None)
    if dev is not None:
        env["JET_SERVERS"] = ",".join(dev.servers)
    return env


def jet(
    dev: Servers | None,
    *args: str,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``jet ARGS`` (bounded by TIMEOUT_S), with ``stdin`` as its input if given and ``env``
    added to its environment."""
    return subprocess.run(
        [sys.executable, "-m", "jetserver.cli.main", *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**jet_env(dev), **(env or {})},
        check=False,
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """Its stdout, after checking the exit code was 0."""
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout
