"""Jet servers for the server tests, on the public test kit (:mod:`jetserver.testing`).

async with running_server(nats.url, tmp_path / "data") as server:   # in this event loop
    server.address
proc = start_server_process(nats.url, tmp_path / "s1", "--log-level", "INFO")
proc.address; proc.ready_file; proc.log_path; proc.stop()           # a `jet server`
with stopping(start_server_process(nats.url, tmp_path / "s1")) as proc:  # exit 0 at the end
with gated_server_process(nats.url, tmp_path) as (gate, proc):       # its fsyncs gated
    gate.close()
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from jetsdk.codec.record import Record
from jetserver.cli.server_cmd import register
from jetserver.testing import JetServer, running_server, server_config
from support.fsync_fault import FsyncGate
from support.raw_client import RawClient

__all__ = [
    "gated_server_process",
    "records_after_restart",
    "running_server",
    "server_args",
    "start_server_process",
    "stopping",
]


def start_server_process(
    nats_url: str,
    data_dir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    file_limit: int | None = None,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
) -> JetServer:
    """Start `jet server` (id s1, port 0, log level DEBUG unless ``args`` say otherwise)
    with its data in ``data_dir`` and its run files in ``<data_dir>.run``; wait until ready.
    ``env`` is added to its environment (e.g. a fault shim); ``settings`` (section -> key ->
    value) go into its config file (a second ``--config`` in ``args`` would replace it)."""
    root = data_dir.parent / f"{data_dir.name}.run"
    config = server_config(
        "s1", root, nats_url, data_dir=data_dir, log_level="DEBUG", settings=settings
    )
    server = JetServer(
        "s1", root, config, args=args, extra_env=dict(env or {}), file_limit=file_limit
    )
    server.start()
    return server


def start_faulty_process(
    nats_url: str, data_dir: Path, fault_env: dict[str, str], *, fsync_on_loop: bool = True
) -> JetServer:
    """:func:`start_server_process` at log level INFO with a fault shim's environment
    (``FsyncFault.env()``); ``fsync_on_loop`` false: every fsync in a worker thread
    (``[storage] fsync_on_loop``)."""
    return start_server_process(
        nats_url,
        data_dir,
        "--log-level",
        "INFO",
        env=fault_env,
        settings={"storage": {"fsync_on_loop": fsync_on_loop}},
    )


@contextmanager
def stopping(server: JetServer) -> Iterator[JetServer]:
    """``server`` (e.g. of :func:`start_server_process`) for a ``with`` block, at whose end
    it is stopped and must exit cleanly (status 0); as :func:`contextlib.closing`."""
    try:
        yield server
    finally:
        assert server.stop() == 0


@contextmanager
def gated_server_process(
    nats_url: str,
    tmp_path: Path,
    *args: str,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    match: str = "/streams/",
) -> Iterator[tuple[FsyncGate, JetServer]]:
    """A `jet server` (:func:`start_server_process`, data in ``tmp_path / "data"``) whose
    syncs of stream files wait while the gate is closed (the fsync shim: the test takes the
    ``fsync_shim`` fixture; ``match``: of the files whose path has it, e.g. one stream's
    ``"/streams/<name>-"``); at the end the gate is opened and the server stopped (exit 0)."""
    gate = FsyncGate(tmp_path / "gate", match=match)
    data_dir = tmp_path / "data"
    with stopping(
        start_server_process(nats_url, data_dir, *args, env=gate.env(), settings=settings)
    ) as proc:
        try:
            yield gate, proc
        finally:
            gate.open()  # before the stop: a sync held at the gate would hold the exit


async def records_after_restart(
    nats_url: str, data_dir: Path, stream: str, bound_s: float
) -> list[Record]:
    """Every committed record of ``stream``/0 as a `jet server` started again on
    ``data_dir`` (log level INFO) reads them back, within ``bound_s``; the server is stopped
    after."""
    proc = start_server_process(nats_url, data_dir, "--log-level", "INFO")
    try:
        with anyio.fail_after(bound_s):
            async with await RawClient.connect(proc.address) as c:
                return await c.fetch_all(stream, 0)
    finally:
        proc.stop()


def server_args(*argv: str) -> argparse.Namespace:
    """``jet server ARGV...`` as the command line parses it."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["server", *argv])
