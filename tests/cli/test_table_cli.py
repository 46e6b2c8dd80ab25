"""`jet table get|put|delete|watch` against the worker's `jet dev`: run in this process, with
a child's exit code, stdout and stderr (support.jet_cli.jet; `table` is a client command
that prints and returns, so 12 child interpreters were CPU spent on imports)."""

from __future__ import annotations

import anyio
import orjson
import pytest

from jetsdk import Client
from support.jet_cli import jet
from support.jet_dev import JetDev


async def _create(dev: JetDev, name: str) -> None:
    async with Client(dev.servers) as client:
        await client.create_stream(name, compact=True)


@pytest.mark.timeout(300)
def test_put_get_cas_delete_watch(jet_dev: JetDev) -> None:
    anyio.run(_create, jet_dev, "tcli")
    first = jet(jet_dev, "table", "put", "tcli", "AAPL", "189.5")
    assert first.returncode == 0, first.stderr
    rev = int(first.stdout)
    refused = jet(jet_dev, "table", "put", "tcli", "AAPL", "x", "--create")
    assert refused.returncode == 1
    assert f"current revision {rev}" in refused.stderr
    cas = jet(jet_dev, "table", "put", "tcli", "AAPL", "190.1", "--revision", str(rev))
    assert cas.returncode == 0, cas.stderr
    got = orjson.loads(jet(jet_dev, "table", "get", "tcli", "AAPL", "--json").stdout)
    assert got == {"key": "AAPL", "value": "190.1", "revision": int(cas.stdout)}
    assert jet(jet_dev, "table", "put", "tcli", "MSFT", "410").returncode == 0
    assert jet(jet_dev, "table", "delete", "tcli", "MSFT").returncode == 0
    missing = jet(jet_dev, "table", "get", "tcli", "MSFT")
    assert missing.returncode == 1
    assert "no key" in missing.stderr
    watched = jet(jet_dev, "table", "watch", "tcli", "--count", "1")
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout == f"PUT AAPL = 190.1 @{cas.stdout.strip()}\n"


@pytest.mark.timeout(300)
def test_put_with_ttl_and_watch_reports_the_expiry(jet_dev: JetDev) -> None:
    """`put --ttl`: `watch --count 2` shows the key, then its expiry (waiting for it, bounded
    by the test's timeout). 10 s: the watch must start before the expiry."""
    anyio.run(_create, jet_dev, "tttl")
    put = jet(jet_dev, "table", "put", "tttl", "lock", "me", "--create", "--ttl", "10")
    assert put.returncode == 0, put.stderr
    watched = jet(jet_dev, "table", "watch", "tttl", "--count", "2", "--json")
    assert watched.returncode == 0, watched.stderr
    docs = [orjson.loads(line) for line in watched.stdout.splitlines()]
    assert docs[0] == {"key": "lock", "value": "me", "revision": int(put.stdout), "initial": True}
    assert docs[1]["expired"] is True
    assert docs[1]["value"] is None
    assert jet(jet_dev, "table", "get", "tttl", "lock").returncode == 1
    bad = jet(jet_dev, "table", "put", "tttl", "k", "v", "--ttl", "0")
    assert bad.returncode == 2
