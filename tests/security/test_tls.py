"""TLS on the client protocol: handshake ok, wrong CA, client certificates required."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from jetsdk import Client
from jetsdk.codec.messages import AckPolicy, ProduceMessage, ProduceRequest
from jetsdk.codec.record import iter_records
from jetsdk.errors import JetConnectionError
from jetsdk.security import tls_context
from security.certs import CertAuthority, CertFiles
from support.jet_server import running_server
from support.nats_server import NatsServer

pytestmark = pytest.mark.anyio
CONNECT_S = 10.0


def _tls_settings(ca: CertAuthority, *, client_auth: str = "none") -> dict[str, object]:
    server = ca.issue("jet-server")
    return {
        "tls__cert": server.cert,
        "tls__key": server.key,
        "tls__ca": str(ca.ca_path),
        "tls__client_auth": client_auth,
    }


async def test_tls_roundtrip_and_wrong_ca(
    nats_server: NatsServer, tmp_path: Path, ca: CertAuthority, other_ca: CertAuthority
) -> None:
    settings = _tls_settings(ca)
    async with running_server(nats_server.url, tmp_path / "data", **settings) as jet:
        # A client trusting the CA: full round trip, records served through TLS (no sendfile).
        async with Client(jet.address, tls_ca=str(ca.ca_path), connect_timeout=CONNECT_S) as c:
            await c.create_stream("tls-s", "tls.s")
            value = b"x" * 300_000
            request = ProduceRequest(
                # ALL: the HW covers both records once acked (a LEADER ack may come first).
                "tls-s",
                0,
                AckPolicy.ALL,
                10_000,
                (ProduceMessage(value), ProduceMessage(b"y")),
            )
            results = await c.produce(request)
            assert [r.error_code for r in results] == [0, 0]
            header, records = await c.fetch("tls-s", 0, 0, max_bytes=1 << 20, max_wait=5.0)
            assert [r.value for r in iter_records(records)] == [value, b"y"]
            assert header.hw == 2
        # Wrong CA: the handshake fails on the client side.
        with pytest.raises(JetConnectionError):
            async with Client(jet.address, tls_ca=str(other_ca.ca_path), connect_timeout=CONNECT_S):
                pass
        # A plain TCP client gets no usable answer from a TLS listener.
        with pytest.raises(JetConnectionError):
            async with Client(jet.address, connect_timeout=3.0):
                pass
        # The server still serves good clients after the failures.
        ctx = tls_context(str(ca.ca_path))
        async with Client(jet.address, tls=ctx, server_hostname="localhost") as c:
            assert (await c.describe_stream("tls-s")).name == "tls-s"


async def test_client_certificate_required(
    nats_server: NatsServer, tmp_path: Path, ca: CertAuthority, other_ca: CertAuthority
) -> None:
    settings = _tls_settings(ca, client_auth="required")
    alice = ca.issue("alice", server=False)
    stranger = other_ca.issue("mallory", server=False)
    async with running_server(nats_server.url, tmp_path / "data", **settings) as jet:

        def client_with(cert: CertFiles | None) -> Client:
            """A client that trusts ``ca`` and shows ``cert`` (None: no certificate)."""
            shown = {} if cert is None else {"tls_cert": cert.cert, "tls_key": cert.key}
            return Client(jet.address, tls_ca=str(ca.ca_path), connect_timeout=CONNECT_S, **shown)

        # No client certificate: refused.
        with pytest.raises(JetConnectionError):
            async with client_with(None):
                pass
        # A certificate from another CA: refused.
        with pytest.raises(JetConnectionError):
            async with client_with(stranger):
                pass
        # A certificate from the CA: accepted.
        async with client_with(alice) as c:
            assert c.server_info["server_id"]


def test_tls_config_errors(tmp_path: Path, ca: CertAuthority) -> None:
    from jetserver.config.load import load_config
    from jetserver.errors import ConfigError

    with pytest.raises(ConfigError, match="cert and key"):
        load_config(None, {}, {("tls", "cert"): "a.pem"})
    with pytest.raises(ConfigError, match="client_auth"):
        load_config(None, {}, {("tls", "client_auth"): "required"})
    assert isinstance(tls_context(str(ca.ca_path)), ssl.SSLContext)


async def test_nats_link_with_client_certificate(tmp_path: Path, ca: CertAuthority) -> None:
    """The server's own NATS connection: mutual TLS with the [nats] tls_* settings."""
    nats_cert = ca.issue("nats")
    jet_cert = ca.issue("jet-nats-client", server=False)
    tls = (
        f'tls {{ cert_file: "{nats_cert.cert}", key_file: "{nats_cert.key}", '
        f'ca_file: "{ca.ca_path}", verify: true }}'
    )
    with NatsServer(extra_config=tls, work_dir=tmp_path / "nats") as secure:
        url = secure.url.replace("nats://", "tls://")
        settings = {
            "nats__tls_ca": str(ca.ca_path),
            "nats__tls_cert": jet_cert.cert,
            "nats__tls_key": jet_cert.key,
        }
        async with running_server(url, tmp_path / "data", **settings) as jet:
            assert jet.link.connected
            async with Client(jet.address) as c:
                await c.create_stream("mtls", "mtls")
                request = ProduceRequest(
                    "mtls", 0, AckPolicy.LEADER, 10_000, (ProduceMessage(b"m"),)
                )
                assert (await c.produce(request))[0].error_code == 0
