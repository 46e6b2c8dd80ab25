"""The examples in spec/groups.md are exact encoder output, and decode back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jetsdk.group.records import decode_record, encode_record

SPEC = Path(__file__).resolve().parents[2] / "spec" / "groups.md"
_BLOCK = re.compile(r"<!-- example -->\s*```json\n(.*?)\n```", re.S)


def _examples() -> list[str]:
    return _BLOCK.findall(SPEC.read_text(encoding="utf-8"))


def test_spec_has_examples() -> None:
    assert len(_examples()) >= 6


@pytest.mark.parametrize("text", _examples())
def test_example_is_canonical(text: str) -> None:
    raw = text.encode("utf-8")
    assert encode_record(decode_record(raw)) == raw
