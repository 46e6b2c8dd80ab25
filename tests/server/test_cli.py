"""`jet server` and `jet dev` as processes: ready file, clean shutdown on SIGTERM, errors."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage
from support.jet_cli import jet
from support.jet_dev import JetDev
from support.jet_server import start_server_process, stopping
from support.nats_server import NatsServer
from support.raw_client import RawClient


@pytest.mark.anyio
async def test_sigterm_is_a_clean_shutdown(nats_server: NatsServer, tmp_path: Path) -> None:
    data = tmp_path / "s1"
    proc = start_server_process(nats_server.url, data)
    try:
        ready = orjson.loads(proc.ready_file.read_bytes())
        assert ready["address"] == proc.address
        async with await RawClient.connect(proc.address) as c:
            await c.create_stream(name="cli", subject="cli")
            # LEADER acks: acknowledged before the fsync; the clean shutdown must flush them.
            results = await c.produce(
                "cli",
                0,
                [ProduceMessage(str(i).encode()) for i in range(200)],
                ack_policy=AckPolicy.LEADER,
            )
            assert [r.offset for r in results] == list(range(200))
    finally:
        code = proc.stop()
    assert code == 0, proc.log_path.read_text()
    assert not proc.ready_file.exists()
    log = proc.log_path.read_text()
    assert "server stopped" in log
    with stopping(start_server_process(nats_server.url, data)) as proc:
        async with await RawClient.connect(proc.address) as c:
            records = await c.fetch_all("cli", 0)
        assert [r.value for r in records] == [str(i).encode() for i in range(200)]
    log = proc.log_path.read_text().rsplit("---- start", 1)[-1]  # the second start's part
    # The stop marked the log cleanly shut down (its close runs in a worker thread), and
    # the start says once how many partitions it opened.
    assert "unclean shutdown" not in log
    assert "partitions opened count=1 offline=0" in log


def test_config_errors_exit_2(tmp_path: Path) -> None:
    result = jet(None, "server", "--port", "70000", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert "port must be within 0..65535" in result.stderr
    result = jet(None, "server", env={"JET_LIMITS_MAX_MESSAGE_BYTES": "lots"})
    assert result.returncode == 2
    assert "JET_LIMITS_MAX_MESSAGE_BYTES" in result.stderr


def test_port_in_use_exits_1(nats_server: NatsServer, tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = jet(
            None,
            "server",
            "--nats",
            nats_server.url,
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path),
        )
    assert result.returncode == 1
    assert "Address already in use" in result.stderr


def test_dev_refuses_too_many_servers(tmp_path: Path) -> None:
    result = jet(None, "dev", "--servers", "10", "--data-dir", str(tmp_path))
    assert result.returncode == 2
    assert "a dev cluster runs 1 to 9 servers" in result.stderr


@pytest.mark.anyio
async def test_jet_dev_fixture(jet_dev: JetDev) -> None:
    assert jet_dev.nats_url.startswith("nats://127.0.0.1:")
    assert len(jet_dev.servers) == 1
    async with await RawClient.connect(jet_dev.server) as c:
        await c.create_stream(name="dev", subject="dev")
        results = await c.produce("dev", 0, [ProduceMessage(b"hello")], ack_policy=AckPolicy.ALL)
        assert results[0].offset == 0
        (record,) = await c.collect("dev", 0, 1)
        assert record.value == b"hello"


def test_jet_dev_stops_everything_it_started(tmp_path: Path) -> None:
    dev = JetDev.start(tmp_path / "data")
    server_pid_file = tmp_path / "data" / "s1.run" / "ready.json"
    server_pid = orjson.loads(server_pid_file.read_bytes())["pid"]
    assert dev.stop() == 0
    assert not _alive(server_pid)
    # The kept data dir holds the server's data; temp dirs are the default.
    assert (tmp_path / "data" / "s1").is_dir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie would still answer; jet dev reaps its children, so this is a real process.
    return True
