"""`jet COMMAND` imports only that command's modules (every `jet` run of the CLI tests, and
a user's, paid about 1 s of CPU importing the whole server before), `jet dev` does not
import the server it runs as processes, and every command is still listed and parsed."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from jetserver.cli.main import COMMANDS, build_parser

PROBE = """
import sys, orjson
from jetserver.cli.main import build_parser
build_parser(sys.argv[1])
print(orjson.dumps(sorted(m for m in sys.modules if m.startswith(("jetserver", "nats")))).decode())
"""


def _loaded_by(command: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, command], capture_output=True, timeout=60, check=True
    ).stdout
    return set(orjson.loads(out))


@pytest.mark.parametrize("command", ["stream", "pub", "acl", "table", "share", "cluster"])
def test_a_client_command_does_not_import_the_server(command: str) -> None:
    loaded = _loaded_by(command)
    assert "jetserver.server" not in loaded
    assert "jetserver.testing.devcluster" not in loaded
    assert not {m for m in loaded if m.startswith("nats")}, "nats-py is the server's link"


def test_jet_dev_runs_its_servers_without_importing_one() -> None:
    """`jet dev` starts nats-server and `jet server` processes (jetserver.testing's process
    kit): the in-process server is imported only where it is used."""
    loaded = _loaded_by("dev")
    assert "jetserver.testing.devcluster" in loaded
    assert "jetserver.server" not in loaded
    assert "jetserver.testing.in_process" not in loaded


def test_the_test_kit_still_exports_the_in_process_server() -> None:
    from jetserver import testing
    from jetserver.testing.in_process import in_process_config, running_server

    assert testing.running_server is running_server
    assert testing.in_process_config is in_process_config
    assert {"running_server", "in_process_config"} <= set(testing.__all__)
    with pytest.raises(AttributeError):
        _ = testing.no_such_name


def test_every_command_is_registered_by_its_modules() -> None:
    everything = build_parser()
    listed = everything._subparsers._group_actions[0].choices
    assert set(listed) == set(COMMANDS)
    for command in COMMANDS:
        alone = build_parser(command)
        assert command in alone._subparsers._group_actions[0].choices


def test_an_unknown_command_lists_every_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "jetserver.cli.main", "bogus"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    for command in COMMANDS:
        assert repr(command) in result.stderr
