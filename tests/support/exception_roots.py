"""The public exception classes a package defines, for the tests that each has its root."""

from __future__ import annotations

import importlib
import pkgutil


def public_exceptions(package: str) -> dict[str, type[BaseException]]:
    """Every public exception class defined in ``package``'s modules, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and not name.startswith("_")
            ):
                found[f"{info.name}.{name}"] = value
    return found


def outside(package: str, root: type[BaseException], allowed: set[str]) -> list[str]:
    """The public exceptions of ``package`` not under ``root`` and not in ``allowed`` (and
    fails if ``allowed`` names one that is gone, so the list shrinks with the code)."""
    found = public_exceptions(package)
    gone = allowed - found.keys()
    assert not gone, f"no longer defined (drop them from the list): {sorted(gone)}"
    return sorted(n for n, cls in found.items() if not issubclass(cls, root) and n not in allowed)
