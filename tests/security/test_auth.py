"""Authentication: token, user + password, TLS identity; missing and bad credentials."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from jetsdk import Client
from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.frames import Api
from jetsdk.errors import JetConnectionError, Unauthenticated
from jetserver.cli.main import main as jet_main
from jetserver.security.passwords import hash_password, hash_token, parse_entry, verify_password
from security.certs import CertAuthority
from support.jet_server import running_server
from support.nats_server import NatsServer
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio
TOKEN = "bot-token-0123456789-abcdefghijkl"


def _auth_settings(**extra: object) -> dict[str, object]:
    return {
        "auth__enabled": True,
        "auth__users": (f"alice={hash_password('s3cret')}",),
        "auth__tokens": (f"bot={hash_token(TOKEN)}",),
        "auth__acls": ("alice:admin:*", "bot:fetch:*"),
        **extra,
    }


async def test_token_password_missing_and_bad(nats_server: NatsServer, tmp_path: Path) -> None:
    async with running_server(nats_server.url, tmp_path / "data", **_auth_settings()) as jet:
        async with Client(jet.address, user="alice", password="s3cret") as c:
            assert c.identity == "alice"
            assert c.server_info["auth_required"] is True
            await c.create_stream("auth-s", "auth.s")
        async with Client(jet.address, token=TOKEN) as c:
            assert c.identity == "bot"
            assert (await c.list_offsets("auth-s")).offset == 0
        # Bad password / unknown token: the Authenticate answer is UNAUTHENTICATED.
        with pytest.raises(Unauthenticated):
            async with Client(jet.address, user="alice", password="wrong"):
                pass
        with pytest.raises(Unauthenticated):
            async with Client(jet.address, token="not-a-token"):
                pass
        # No credentials: Hello works, the first other request is refused...
        async with Client(jet.address) as c:
            with pytest.raises(Unauthenticated):
                await c.list_offsets("auth-s")
        # ... and the server closes the connection after that answer.
        async with await RawClient.connect(jet.address) as raw:
            assert (await raw.hello())["auth_required"] is True
            with pytest.raises(ServerError) as err:
                await raw.call_json(Api.METADATA, {"streams": None})
            assert err.value.code == ErrorCode.UNAUTHENTICATED
            assert await raw.wait_closed(timeout_s=10.0) == []


async def test_tls_identity(nats_server: NatsServer, tmp_path: Path, ca: CertAuthority) -> None:
    server = ca.issue("jet-server")
    carol = ca.issue("carol", server=False)
    settings = _auth_settings(
        tls__cert=server.cert,
        tls__key=server.key,
        tls__ca=str(ca.ca_path),
        tls__client_auth="optional",
        auth__tls_identity=True,
        auth__acls=("carol:fetch:*", "alice:admin:*"),
    )
    async with running_server(nats_server.url, tmp_path / "data", **settings) as jet:
        tls = {"tls_ca": str(ca.ca_path)}
        async with Client(jet.address, **tls, tls_cert=carol.cert, tls_key=carol.key) as c:
            assert c.identity == "carol"  # from the certificate, no Authenticate needed
            assert c.server_info["identity"] == "carol"
            await c.metadata(refresh=True)
        # Without a certificate the connection must authenticate otherwise.
        async with Client(jet.address, **tls, user="alice", password="s3cret") as c:
            assert c.identity == "alice"
        with pytest.raises(JetConnectionError):
            async with Client(jet.address, connect_timeout=3.0, user="alice", password="s3cret"):
                pass  # plain TCP to a TLS listener


async def test_auth_disabled_by_default(nats_server: NatsServer, tmp_path: Path) -> None:
    async with (
        running_server(nats_server.url, tmp_path / "data") as jet,
        Client(jet.address, token="anything") as c,
    ):
        assert "auth_required" not in c.server_info
        assert c.identity is None
        await c.create_stream("open-s", "open.s")


def test_hashes_and_jet_passwd(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stored = hash_password("pw", n=1 << 10)
    assert verify_password("pw", stored)
    assert not verify_password("pw2", stored)
    monkeypatch.setattr(sys, "stdin", io.StringIO("hunter2\n"))
    assert jet_main(["passwd", "--name", "dave", "--stdin"]) == 0
    identity, digest = parse_entry(capsys.readouterr().out.strip())
    assert identity == "dave"
    assert verify_password("hunter2", digest)
    assert jet_main(["passwd", "--token"]) == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert lines["entry"] == hash_token(lines["token"])
