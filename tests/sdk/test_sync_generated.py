"""The generated sync API is up to date, lint-clean, and fails cleanly without a server."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from jetsdk import sync
from jetsdk.errors import ClientClosed, JetConnectionError
from support.jet_dev import JetDev
from support.tools import load_tool

ROOT = Path(__file__).parents[2]


def test_generated_files_are_fresh() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_sync.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_generated_files_have_header_and_are_formatted() -> None:
    files = sorted((ROOT / "sdk/python/src/jetsdk/sync").glob("*.py"))
    assert len(files) == 6  # __init__, client, consumer, producer, share, table
    for path in files:
        assert path.read_text().startswith("# generated — do not edit")
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff not installed")
    proc = subprocess.run(
        [ruff, "format", "--check", *map(str, files)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _generator() -> ModuleType:
    """tools/gen_sync.py as a module (its SPECS say which methods are not mirrored)."""
    return load_tool("gen_sync", "jet_tools_gen_sync")


def test_public_methods_mirror_the_async_classes() -> None:
    from jetsdk import Client, Consumer, Producer

    assert {"send", "send_soon", "flush"} <= set(dir(sync.Producer))
    assert {"fetch", "seek", "position", "__iter__", "__next__"} <= set(dir(sync.Consumer))
    skipped = {spec.cls: spec.skip for spec in _generator().SPECS}
    assert skipped["Client"] >= {"produce", "fetch"}  # the raw request API stays async
    for cls in (Client, Producer, Consumer):
        mirror = getattr(sync, cls.__name__)
        public = {n for n in dir(cls) if not n.startswith("_")}
        missing = public - set(dir(mirror))
        assert missing <= skipped[cls.__name__], missing


def test_unreachable_server_and_use_before_open() -> None:
    client = sync.Client(["127.0.0.1:1"], connect_timeout=2)
    with pytest.raises(JetConnectionError):
        client.open()
    with pytest.raises(ClientClosed):
        client.list_streams()


def test_properties_read_the_async_object_and_are_read_only(jet_dev: JetDev) -> None:
    from jetsdk import Producer

    # The reference page and help() show the async property's docstring.
    assert sync.Producer.pending.__doc__ == Producer.pending.__doc__
    client = sync.Client(jet_dev.servers)
    with pytest.raises(ClientClosed):
        _ = client.max_message_bytes  # not open: no async client to read
    name = f"gen-{uuid.uuid4().hex[:8]}"
    with client:
        assert client.max_message_bytes == client._obj.max_message_bytes > 0
        client.create_stream(name, name, partitions=3)
        with sync.Producer(client, name) as producer:
            assert producer.num_partitions == 3
            producer.send(b"x")
            assert producer.pending == 0
            with pytest.raises(AttributeError, match="no setter"):
                producer.pending = 1  # type: ignore[assignment]
