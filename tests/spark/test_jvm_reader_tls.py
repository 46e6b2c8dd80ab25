"""The JVM reader (format ``jetstream-jvm``) over TLS (options tls, tlsCa, tlsCert, tlsKey,
tlsServerHostname, as the Python source's): against a real server with TLS and a client
certificate required, and a real Spark, it reads what the Python reader reads; a name the
certificate does not carry, or a CA that did not sign it, fails the read naming the
handshake."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from jetsdk import AckPolicy, Client, Producer
from jetspark.jvm import JVM_FORMAT, source_format
from security.certs import CertAuthority
from support.jet_server import running_server
from support.nats_server import NatsServer

from .test_jvm_reader_modes import _read

pytestmark = [pytest.mark.spark, pytest.mark.anyio]


async def test_tls_with_a_client_certificate(
    spark: Any, nats_server: NatsServer, tmp_path: Path
) -> None:
    ca = CertAuthority(tmp_path / "ca")
    other = CertAuthority(tmp_path / "other", name="other-ca")
    server, client = ca.issue("jet-server"), ca.issue("spark-reader")
    settings: dict[str, object] = {
        "tls__cert": server.cert,
        "tls__key": server.key,
        "tls__ca": str(ca.ca_path),
        "tls__client_auth": "required",
    }
    tls = {"tlsCa": str(ca.ca_path), "tlsCert": client.cert, "tlsKey": client.key}
    async with running_server(nats_server.url, tmp_path / "data", **settings) as jet:
        async with Client(
            jet.address, tls_ca=tls["tlsCa"], tls_cert=client.cert, tls_key=client.key
        ) as sdk:
            await sdk.create_stream("jvm-tls", "jvm.tls", partitions=3)
            async with Producer(sdk, "jvm-tls", ack=AckPolicy.ALL) as producer:
                for i in range(40):
                    await producer.send_soon(b"v%d" % i * 300, b"k%d" % i)
                await producer.flush()

        async def read(fmt: str, **options: str) -> list[Any]:
            run = partial(_read, spark, jet.address, "jvm-tls", fmt, **options)
            return await anyio.to_thread.run_sync(run)

        assert source_format(spark, {"servers": jet.address, "streams": "s", **tls}) == JVM_FORMAT
        python = await read("jetstream", **tls)
        assert len(python) == 40
        assert await read(JVM_FORMAT, **tls) == python
        assert await read(JVM_FORMAT, **tls, tlsServerHostname="localhost") == python
        with pytest.raises(
            Exception, match=r"TLS handshake with .*\(checked as wrong\.example\) failed"
        ):
            await read(JVM_FORMAT, **tls, tlsServerHostname="wrong.example")
        with pytest.raises(Exception, match="TLS handshake"):
            await read(JVM_FORMAT, **{**tls, "tlsCa": str(other.ca_path)})
        with pytest.raises(Exception, match="tlsCert and tlsKey go together"):
            await read(JVM_FORMAT, tlsCa=tls["tlsCa"], tlsCert=client.cert)
