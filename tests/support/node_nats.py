"""The npm package ``nats`` (nats.js) for tests that drive jet from another language.

:func:`node_nats_dir` installs it once per test session into a temporary folder (npm from
the package registry; nothing is committed) and returns the folder to run ``node`` in.
:class:`NodeUnavailable` says why it cannot (no node or npm, the install failed); tests
skip with that reason.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest

NATS_JS_VERSION = "2.29.3"
INSTALL_TIMEOUT_S = 300.0
SCRIPTS = sorted(Path(__file__).parent.glob("node_*.js"))
"""Every Node.js script of the tests (copied next to ``node_modules``)."""


class NodeUnavailable(RuntimeError):
    """Node.js or the nats package cannot be used here."""


@functools.cache
def node_nats_dir() -> Path:
    """A folder with ``node_modules/nats`` and the client scripts (installed once)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise NodeUnavailable("node and npm are needed for the Node.js client tests")
    folder = Path(tempfile.mkdtemp(prefix="jet-node-nats-"))
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", f"nats@{NATS_JS_VERSION}"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise NodeUnavailable(f"npm install nats timed out: {exc}") from None
    if done.returncode != 0 or not (folder / "node_modules" / "nats").is_dir():
        raise NodeUnavailable(f"npm install nats failed: {done.stderr[-2000:]}")
    for script in SCRIPTS:
        shutil.copy(script, folder / script.name)
    return folder


NODE_TIMEOUT_S = 60.0


def run_node_script(script: str, *args: str) -> Any:
    """Run one of the scripts with node; the JSON of its last stdout line. Skips the test
    (pytest.skip) where node or the nats package is not to be had.

    Raises:
        AssertionError: the script failed (its stderr tail in the message).
    """
    try:
        folder = node_nats_dir()
    except NodeUnavailable as exc:
        pytest.skip(str(exc))
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, script, *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return orjson.loads(done.stdout.strip().splitlines()[-1])
