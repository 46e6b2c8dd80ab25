"""The servers ``jet top`` and ``jet console`` show are the ones their client dials."""

from __future__ import annotations

import argparse

import pytest

from jetsdk.client_dial import ENV_SERVERS, resolve_servers
from jetserver.cli.stream_cmd import servers_shown


@pytest.mark.parametrize(
    ("flag", "env", "shown"),
    [
        ("a:1,b:2", "c:3", "a:1,b:2"),
        (None, "c:3", "c:3"),
        (None, "", "127.0.0.1:9292"),  # set but empty: the client's default, as it dials
        (None, None, "127.0.0.1:9292"),
    ],
)
def test_shown_is_what_the_client_dials(
    monkeypatch: pytest.MonkeyPatch, flag: str | None, env: str | None, shown: str
) -> None:
    if env is None:
        monkeypatch.delenv(ENV_SERVERS, raising=False)
    else:
        monkeypatch.setenv(ENV_SERVERS, env)
    got = servers_shown(argparse.Namespace(servers=flag))
    assert got == shown
    assert resolve_servers(got) == resolve_servers(flag)
