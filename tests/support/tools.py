"""The repository's scripts under tools/ as modules, for the tests of them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def load_tool(name: str, module_name: str) -> ModuleType:
    """``tools/<name>.py`` imported as ``module_name`` (registered in ``sys.modules``: its
    dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(module_name, TOOLS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
