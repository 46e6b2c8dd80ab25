"""Every code example of the README, the docs site and the spec runs as printed (issue 36).

Each ``python``, ``sh`` and ``js`` block (tests/doc_examples/blocks.py) not marked as a
fragment is saved to a file and run the way a user who copied it would: ``python FILE``,
``bash FILE``, ``node FILE``, against one ``jet dev`` of the module's own
(``module_jet_dev``: the blocks share its state), with ``JET_SERVERS`` and ``NATS_URL`` set to
what it printed (the README tells users to export both). Blocks run in document order, as a
reader would; each one must exit 0 within a bound and print no traceback.

- ``nats`` lines run the real `nats` CLI when it is on PATH, else the nats-py stand-in
  tests/doc_examples/nats_cli.py (``pub`` and ``req``; it prints only the reply).
- ``js`` blocks need node and the npm package ``nats`` (tests/support/node_nats.py); they
  skip with the reason where either is missing.
- Blocks that import pyspark need it and Java; they skip with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from doc_examples.blocks import ROOT, Block, all_blocks
from support.jet_dev import JetDev
from support.node_nats import NodeUnavailable, node_nats_dir
from support.spark_jvm import JVM_OPTIONS, worker_python_env

BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.kind is not None and b.marker is None]
BLOCK_TIMEOUT_S = 120.0
"""Bound on one example (a Spark example: :data:`SPARK_TIMEOUT_S`)."""
SPARK_TIMEOUT_S = 420.0
SUFFIX = {"python": ".py", "sh": ".sh", "js": ".js"}
NATS_CLI = Path(__file__).with_name("nats_cli.py")


def needs_spark(block: Block) -> bool:
    return block.kind == "python" and "pyspark" in block.code


def params() -> list[object]:
    out: list[object] = []
    for block in RUN:
        marks: list[pytest.MarkDecorator] = []
        if needs_spark(block):
            marks += [pytest.mark.spark, pytest.mark.timeout(SPARK_TIMEOUT_S + 60)]
        else:
            marks.append(pytest.mark.timeout(BLOCK_TIMEOUT_S + 60))
        out.append(pytest.param(block, id=block.name, marks=marks))
    return out


def test_every_example_is_run_or_marked() -> None:
    """The convention holds: markers are well formed (checked while reading the files),
    a ``tested-by`` file exists and names the block's heading, and there is something to
    run in the README."""
    for block in BLOCKS:
        if block.marker == "tested-by":
            tester = ROOT / block.note
            assert tester.is_file(), f"{block.name}: {block.note} does not exist"
            heading = block.headings[-1] if block.headings else "(no heading)"
            assert heading in tester.read_text(), f"{block.note} does not name {heading!r}"
    readme = [b for b in RUN if b.path.name == "README.md"]
    assert {b.kind for b in readme} == {"python", "sh", "js"}, [b.name for b in readme]


def environment(dev: JetDev, work: Path) -> dict[str, str]:
    """The environment of a user who exported what `jet dev` printed, with this Python's
    scripts (`jet`) first on PATH and the `nats` stand-in where the CLI is missing."""
    env = dict(os.environ)
    env["JET_SERVERS"] = ",".join(dev.servers)
    env["NATS_URL"] = dev.nats_url
    path = [str(Path(sys.executable).parent)]
    if shutil.which("nats") is None:
        bin_dir = work / "bin"
        bin_dir.mkdir(exist_ok=True)
        shim = bin_dir / "nats"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{NATS_CLI}" "$@"\n')
        shim.chmod(0o755)
        path.append(str(bin_dir))
    env["PATH"] = os.pathsep.join([*path, env.get("PATH", "")])
    env.pop("PYTHONPATH", None)
    return env


def command(block: Block, script: Path, env: dict[str, str]) -> list[str]:
    if block.kind == "python":
        if needs_spark(block):
            pytest.importorskip("pyspark", reason="the Spark examples need pyspark")
            if shutil.which("java") is None:
                pytest.skip("the Spark examples need Java")
            # The JVM the example starts gets the tests' options (the java launcher reads
            # JDK_JAVA_OPTIONS): the example runs as printed, its JVM compiles less.
            given = env.get("JDK_JAVA_OPTIONS", "")
            env["JDK_JAVA_OPTIONS"] = f"{given} {JVM_OPTIONS}".strip()
            # Its Python workers import pyspark compiled (support.spark_jvm).
            env.update(worker_python_env())
        return [sys.executable, str(script)]
    if block.kind == "sh":
        return ["bash", "-e", "-o", "pipefail", str(script)]
    try:
        folder = node_nats_dir()
    except NodeUnavailable as exc:
        pytest.skip(str(exc))
    env["NODE_PATH"] = str(folder / "node_modules")
    node = shutil.which("node")
    assert node is not None
    return [node, str(script)]


@pytest.mark.parametrize("block", params())
def test_example_runs_as_printed(block: Block, module_jet_dev: JetDev, tmp_path: Path) -> None:
    env = environment(module_jet_dev, tmp_path)
    script = tmp_path / f"example{SUFFIX[block.kind or '']}"
    script.write_text(block.code)
    bound = SPARK_TIMEOUT_S if needs_spark(block) else BLOCK_TIMEOUT_S
    with subprocess.Popen(
        command(block, script, env),
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: ended whole on a timeout
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate(timeout=30)
            pytest.fail(f"{block.name} did not end within {bound} s: {stdout}\n{stderr}")
    report = f"{block.name} ({block.kind}):\n{block.code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert proc.returncode == 0, report
    assert "Traceback" not in stderr, report
