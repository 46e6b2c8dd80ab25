"""The README's "Testing your code against a real cluster" example runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "### Testing your code against a real cluster"


def readme_example() -> str:
    text = README.read_text()
    section = text[text.index(HEADING) :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "no python block under the heading"
    return match.group(1)


@pytest.mark.timeout(180)
def test_the_readme_example_passes() -> None:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(readme_example(), str(README), "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()
