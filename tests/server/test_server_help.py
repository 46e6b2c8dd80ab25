"""`jet server --help` lists every setting with its default (issue 36, item 9)."""

from __future__ import annotations

import subprocess
import sys

import attrs

from jetserver.config.server import SECTIONS

JET = [sys.executable, "-m", "jetserver.cli.main"]


def test_help_lists_every_setting() -> None:
    result = subprocess.run(
        [*JET, "server", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    _, settings = result.stdout.split("and their defaults:", 1)
    words = settings.split()
    for section, cls in SECTIONS.items():
        assert f"[{section}]" in words
        for field in attrs.fields(cls):
            assert any(word.startswith(f"{field.name}=") for word in words), (section, field)
    assert "startup_wait_s=60.0" in words
    assert "JET_<SECTION>_<KEY>;" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
