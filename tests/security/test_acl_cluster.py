"""Three servers with TLS (client protocol and server to server), authentication and
replicated grants: a grant set through one server is enforced by every server, and
replication (follower fetches over TLS as the internal identity) keeps working.

One cluster for the module (~5-10 s to start on a loaded machine); every wait is bounded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from cluster.harness import Cluster
from jetsdk import Client
from jetsdk.acl import list_acls, set_acl
from jetsdk.codec.messages import AckPolicy, ProduceMessage, ProduceRequest
from jetsdk.errors import JetConnectionError, PermissionDenied, Unauthenticated
from jetserver.security.passwords import hash_token
from security.certs import CertAuthority

pytestmark = pytest.mark.anyio

OPS_TOKEN = "ops-token-0123456789abcdefgh"
ALICE_TOKEN = "alice-token-0123456789abcdef"
INTERNAL_TOKEN = "internal-token-0123456789abcdef"
WAIT_S = 30.0
CONNECT_S = 15.0


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    root = Path(tmp_path_factory.mktemp("secure"))
    ca = CertAuthority(root / "ca")
    cert = ca.issue("jet-server")
    settings = {
        "tls": {"cert": cert.cert, "key": cert.key, "ca": str(ca.ca_path)},
        "auth": {
            "enabled": True,
            "internal_token": INTERNAL_TOKEN,
            "tokens": [f"ops={hash_token(OPS_TOKEN)}", f"alice={hash_token(ALICE_TOKEN)}"],
            "acls": ["ops:admin:*", "ops:publish:*", "ops:fetch:*"],
        },
    }
    with Cluster(root=root / "cluster", settings=settings) as cluster:
        yield cluster, str(ca.ca_path)


async def _eventually(check: object, what: str) -> None:
    with anyio.fail_after(WAIT_S):
        while True:
            # Refused until the grant is applied there; a connect may time out under load.
            with contextlib.suppress(PermissionDenied, JetConnectionError):
                if await check():  # type: ignore[operator]
                    return
            await anyio.sleep(0.1)
    raise AssertionError(what)  # pragma: no cover


async def test_replicated_grants_enforced_everywhere(
    secure_cluster: tuple[Cluster, str],
) -> None:
    cluster, ca_path = secure_cluster
    addresses = cluster.addresses

    def connect(address: str, token: str) -> Client:
        return Client(address, token=token, tls_ca=ca_path, connect_timeout=CONNECT_S)

    assert len(addresses) == 3

    async def ops_ready() -> bool:
        async with Client(
            addresses[0], token=OPS_TOKEN, tls_ca=ca_path, connect_timeout=CONNECT_S
        ) as ops:
            return "ops" in await list_acls(ops)

    await _eventually(ops_ready, "bootstrap grants of ops")
    async with Client(
        addresses[0], token=OPS_TOKEN, tls_ca=ca_path, connect_timeout=CONNECT_S
    ) as ops:
        await ops.create_stream("orders.rf3", "orders.rf3", replication_factor=3)
        # ALL acks need the followers: they fetch from the leader over TLS, authenticated.
        request = ProduceRequest("orders.rf3", 0, AckPolicy.ALL, 20_000, (ProduceMessage(b"one"),))
        results = await ops.produce(request)
        assert results[0].error_code == 0
    # No grant yet: alice is refused by every server; a wrong token by any.
    for address in addresses:
        async with Client(
            address, token=ALICE_TOKEN, tls_ca=ca_path, connect_timeout=CONNECT_S
        ) as alice:
            with pytest.raises(PermissionDenied):
                await alice.describe_stream("orders.rf3")
        with pytest.raises(Unauthenticated):
            async with Client(
                address, token=INTERNAL_TOKEN[::-1], tls_ca=ca_path, connect_timeout=CONNECT_S
            ):
                pass
    # Grant through the last server (forwarded to the metadata leader unless it leads).
    async with Client(
        addresses[2], token=OPS_TOKEN, tls_ca=ca_path, connect_timeout=CONNECT_S
    ) as ops:
        await set_acl(ops, "alice", [("fetch", "orders.*")])
    for address in addresses:

        async def allowed(address: str = address) -> bool:
            async with Client(
                address, token=ALICE_TOKEN, tls_ca=ca_path, connect_timeout=CONNECT_S
            ) as alice:
                return (await alice.describe_stream("orders.rf3")).name == "orders.rf3"

        await _eventually(allowed, f"grant applied on {address}")
        async with Client(
            address, token=ALICE_TOKEN, tls_ca=ca_path, connect_timeout=CONNECT_S
        ) as alice:
            with pytest.raises(PermissionDenied):
                await alice.produce(
                    ProduceRequest(
                        "orders.rf3", 0, AckPolicy.LEADER, 5_000, (ProduceMessage(b"x"),)
                    )
                )
