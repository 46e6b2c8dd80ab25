"""`jet stream ...`, `jet pub`, `jet sub`: output and exit codes (support.jet_cli.jet runs them in
this process, with what a child process would give)."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from jetserver.cli.main import main
from support.jet_cli import jet, ok
from support.jet_dev import JetDev


def json_lines(text: str) -> list[Any]:
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


LIFE = ("stream", "create", "clilife", "--subject", "cli.life", "--partitions", "2")
"""The lifecycle test's create command."""


def test_stream_lifecycle(jet_dev: JetDev) -> None:
    out = ok(jet(jet_dev, *LIFE))
    assert "clilife" in out
    # Idempotent like the SDK: the same settings succeed and say so.
    again = ok(jet(jet_dev, *LIFE))
    assert "exists with the same settings" in again
    strict = jet(jet_dev, *LIFE, "--fail-if-exists")
    assert strict.returncode == 1
    assert "already exists" in strict.stderr
    # Other settings fail, naming the difference.
    other = jet(
        jet_dev, "stream", "create", "clilife", "--subject", "cli.life", "--partitions", "3"
    )
    assert other.returncode == 1
    assert "partitions" in other.stderr
    ok(jet(jet_dev, *LIFE, "--if-not-exists"))
    listing = ok(jet(jet_dev, "stream", "list"))
    assert "clilife" in listing
    assert "cli.life" in listing
    (streams,) = json_lines(ok(jet(jet_dev, "stream", "list", "--json")))
    assert "clilife" in [s["name"] for s in streams]
    (info,) = json_lines(ok(jet(jet_dev, "stream", "info", "clilife", "--json")))
    assert info["name"] == "clilife"
    assert [p["partition"] for p in info["partitions"]] == [0, 1]
    for p in info["partitions"]:
        assert {"leader", "replicas", "isr", "hw", "leo"} <= p.keys()
        assert p["hw"] == 0
    assert "LEADER" in ok(jet(jet_dev, "stream", "info", "clilife"))
    ok(jet(jet_dev, "stream", "delete", "clilife"))
    gone = jet(jet_dev, "stream", "info", "clilife")
    assert gone.returncode == 1
    assert "StreamNotFound" in gone.stderr
    assert jet(jet_dev, "stream", "delete", "clilife").returncode == 1


def test_pub_and_sub(jet_dev: JetDev) -> None:
    ok(jet(jet_dev, "stream", "create", "clips", "--subject", "cli.ps", "--partitions", "2"))
    # The key picks the partition (murmur2: user-1 -> 0 of 2, spec/partitioning.md).
    first = ok(jet(jet_dev, "pub", "cli.ps", "hello", "--key", "user-1", "--header", "trace=abc"))
    assert first.strip() == "stream=clips partition=0 offset=0"
    (ack,) = json_lines(ok(jet(jet_dev, "pub", "cli.ps.1", "one", "--json", "--ack", "all")))
    assert (ack["stream"], ack["partition"], ack["offset"]) == ("clips", 1, 0)
    ok(jet(jet_dev, "pub", "cli.ps", "-", "--ack", "leader", stdin=b"from stdin"))
    raw = bytes([0xFF, 0x00, 0x80])
    # A non-UTF-8 value can only come through stdin (the bytes as given: `pub -` reads
    # sys.stdin.buffer).
    ok(jet(None, "pub", "cli.ps", "-", "--servers", jet_dev.server, stdin=raw))

    lines = json_lines(
        ok(jet(jet_dev, "sub", "clips", "--partition", "0", "--count", "3", "--json"))
    )
    assert [m["offset"] for m in lines] == [0, 1, 2]
    assert lines[0]["key"] == "user-1"
    assert lines[0]["value"] == "hello"
    assert lines[0]["subject"] == "cli.ps"
    assert lines[0]["headers"] == [{"name": "trace", "value": "abc", "encoding": "utf-8"}]
    assert lines[0]["timestamp"] > 0
    assert lines[1]["value"] == "from stdin"
    assert lines[2]["value_encoding"] == "base64"
    assert base64.b64decode(lines[2]["value"]) == raw

    text = ok(jet(jet_dev, "sub", "clips", "--from", "1", "--partition", "0", "--count", "1"))
    assert text.startswith("partition=0 offset=1 ")
    assert "value=from stdin" in text
    all_parts = json_lines(ok(jet(jet_dev, "sub", "clips", "--count", "4", "--json")))
    assert sorted((m["partition"], m["offset"]) for m in all_parts) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
    ]
    idle = ok(jet(jet_dev, "sub", "clips", "--from", "new-only", "--idle-timeout", "0.3"))
    assert idle == ""


def test_pub_errors(jet_dev: JetDev) -> None:
    missing = jet(jet_dev, "pub", "cli.nobody.listens", "x")
    assert missing.returncode == 1
    assert "no stream" in missing.stderr
    assert jet(jet_dev, "pub", "cli.ps", "x", "--header", "novalue").returncode == 2
    assert jet(jet_dev, "sub", "cli-no-such-stream", "--count", "1").returncode == 1


@pytest.mark.parametrize(
    "args",
    [
        ("stream",),
        ("stream", "create"),
        ("stream", "create", "x", "--partitions", "0"),
        ("stream", "create", "x", "--retention-max-age", "forever"),
        ("pub", "only-subject"),
        ("pub", "s", "v", "--ack", "sometimes"),
        ("sub", "s", "--count", "-1"),
    ],
)
def test_bad_arguments_exit_2(args: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    # argparse errors: checked in-process (same main() the `jet` script runs).
    with pytest.raises(SystemExit) as info:
        main(list(args))
    assert info.value.code == 2
    assert "usage: jet" in capsys.readouterr().err


def test_bad_values_exit_2_as_subprocess() -> None:
    for args in (
        ("sub", "s", "--from", "yesterday-ish"),
        ("pub", "cli.*", "x"),
        ("stream", "list", "--servers", "host:notaport"),
    ):
        proc = jet(None, *args)
        assert proc.returncode == 2, (args, proc.stderr)


def test_unreachable_server_exits_3() -> None:
    for args in (("stream", "list"), ("pub", "a", "b"), ("sub", "a", "--count", "1")):
        proc = jet(None, *args, "--servers", "127.0.0.1:1", "--connect-timeout", "2")
        assert proc.returncode == 3, proc.stderr
        assert "cannot reach" in proc.stderr


@pytest.mark.parametrize(
    "args", [(), ("stream",), ("stream", "create"), ("stream", "info"), ("pub",), ("sub",)]
)
def test_help_everywhere(args: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*args, "--help"])
    assert info.value.code == 0
    assert "usage: jet" in capsys.readouterr().out
