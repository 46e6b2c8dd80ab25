"""The README's "Testing your code against a real cluster" example runs as written."""

from __future__ import annotations

from typing import Any

import pytest

from support.readme import README, python_block_under

HEADING = "### Testing your code against a real cluster"


@pytest.mark.timeout(180)
def test_the_readme_example_passes() -> None:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(python_block_under(HEADING), str(README), "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()
