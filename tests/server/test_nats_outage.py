"""NATS going away and coming back: Produce answers UNAVAILABLE, then ingest resumes."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import nats
import pytest

from jetsdk.codec.error_codes import AckPolicy, ErrorCode
from jetsdk.codec.messages import ProduceMessage
from jetserver.natslink.link import NatsLink
from jetserver.testing import nats_flushed
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio


async def wait_link(link: NatsLink, connected: bool, timeout_s: float = 20.0) -> None:
    with anyio.fail_after(timeout_s):
        while link.connected is not connected:
            await link.wait_state_change()


async def test_nats_restart_ingest_resumes(nats_server: NatsServer, tmp_path: Path) -> None:
    async with (
        running_server(nats_server.url, tmp_path / "data") as server,
        await RawClient.connect(server.address) as c,
    ):
        await c.create_stream(name="dur", subject="dur")
        first = await c.produce("dur", 0, [ProduceMessage(b"before")], ack_policy=AckPolicy.ALL)
        assert (first[0].error_code, first[0].offset) == (0, 0)

        await anyio.to_thread.run_sync(nats_server.stop)
        await wait_link(server.link, connected=False)
        with pytest.raises(ServerError) as err:
            await c.produce("dur", 0, [ProduceMessage(b"lost")], ack_policy=AckPolicy.ALL)
        assert err.value.code == ErrorCode.UNAVAILABLE
        # Reads keep working without NATS.
        assert [r.value for r in await c.fetch_all("dur", 0)] == [b"before"]

        await anyio.to_thread.run_sync(nats_server.start)  # same port
        await wait_link(server.link, connected=True)
        await server.link.flush(5)  # the replayed subscriptions are in place
        again = await c.produce("dur", 0, [ProduceMessage(b"after")])
        assert (again[0].error_code, again[0].offset) == (0, 1)
        plain = await nats.connect(nats_server.url)
        try:
            await plain.publish("dur", b"plain-after")
            await nats_flushed(plain)
        finally:
            await plain.close()
        records = await c.collect("dur", 0, 3)
    assert [r.value for r in records] == [b"before", b"after", b"plain-after"]
    assert server.link.disconnects >= 1
    assert server.link.reconnects >= 1


async def test_stop_while_nats_is_unreachable(tmp_path: Path) -> None:
    from jetserver.server import Server
    from jetserver.testing import in_process_config

    # Nothing listens on this port: the server keeps retrying until asked to stop.
    with NatsServer() as gone:
        url = gone.url
    retrying = anyio.Event()

    class OnRetry(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:  # "nats error", "cannot connect ..."
                retrying.set()

    handler = OnRetry()
    logging.getLogger("jetserver.natslink.link").addHandler(handler)
    server = Server(in_process_config(url, tmp_path / "data"))
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.run)
                await retrying.wait()  # an attempt to connect failed
                server.request_stop()
    finally:
        logging.getLogger("jetserver.natslink.link").removeHandler(handler)
    with pytest.raises(RuntimeError, match="not running"):
        server.address  # noqa: B018 - it never listened


async def test_nats_authentication(tmp_path: Path) -> None:
    from jetserver.broker.nats_port import NatsUnavailable
    from jetserver.config.server import NatsConfig

    with NatsServer(extra_config='authorization { user: "jet", password: "s3cret" }') as auth:
        good = NatsLink(NatsConfig(servers=(auth.url,), user="jet", password="s3cret"))
        await good.connect(attempts=1)
        assert good.connected
        await good.close()
        bad = NatsLink(NatsConfig(servers=(auth.url,), user="jet", password="wrong"))
        with anyio.fail_after(10), pytest.raises(NatsUnavailable) as err:
            await bad.connect()  # refused credentials are fatal, not retried forever
        assert "credentials" in str(err.value)
        await bad.close()


def test_tls_files_are_checked(tmp_path: Path) -> None:
    from jetserver.config.server import NatsConfig
    from jetserver.errors import JetServerError
    from jetserver.natslink.connect import tls_context

    assert tls_context(NatsConfig()) is None
    assert tls_context(NatsConfig(servers=("tls://127.0.0.1:4222",))) is not None
    with pytest.raises(JetServerError) as err:
        tls_context(NatsConfig(tls_ca=str(tmp_path / "missing-ca.pem")))
    assert "TLS" in str(err.value)


def _make_certs(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 (openssl CLI)."""
    import shutil
    import subprocess

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed")
    ca_key, ca_crt = directory / "ca.key", directory / "ca.pem"
    key, csr, crt = directory / "srv.key", directory / "srv.csr", directory / "srv.pem"
    ext = directory / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_crt),
        "-days",
        "1",
        "-subj",
        "/CN=jet-test-ca",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        "/CN=127.0.0.1",
    )
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_crt),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(crt),
        "-days",
        "1",
        "-extfile",
        str(ext),
    )
    return ca_crt, crt, key


async def test_nats_over_tls(tmp_path: Path) -> None:
    ca, crt, key = _make_certs(tmp_path)
    tls = f'tls {{ cert_file: "{crt}", key_file: "{key}" }}'
    with NatsServer(extra_config=tls) as secure:
        url = secure.url.replace("nats://", "tls://")
        async with running_server(url, tmp_path / "data", nats__tls_ca=str(ca)) as server:
            assert server.link.connected
            async with await RawClient.connect(server.address) as c:
                await c.create_stream(name="tls", subject="tls")
                results = await c.produce("tls", 0, [ProduceMessage(b"secret")])
                assert results[0].offset == 0
