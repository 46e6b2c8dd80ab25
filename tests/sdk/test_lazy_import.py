"""``import jetsdk.codec`` (the server's wire codec) does not import the client; the public
names of ``jetsdk`` still import on first use (checked in a child process: imports are
process-wide)."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import sys
import jetsdk.codec.limits
print("jetsdk.client" in sys.modules, "jetsdk.consumer" in sys.modules, end=" ")
import jetsdk
from jetsdk import Client, Producer
from jetsdk.client import Client as C2
print(Client is C2, Producer.__name__, "jetsdk.client" in sys.modules, end=" ")
print(sorted(dir(jetsdk)) == sorted(jetsdk.__all__), end=" ")
print(all(getattr(jetsdk, n) is not None for n in jetsdk.__all__), end=" ")
try:
    jetsdk.NoSuchName
except AttributeError:
    print("AttributeError")
"""


def test_codec_import_leaves_the_client_out_and_public_names_import_on_use() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == [
        "False",
        "False",
        "True",
        "Producer",
        "True",
        "True",
        "True",
        "AttributeError",
    ], out.stderr
