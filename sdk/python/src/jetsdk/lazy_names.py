"""A package's names imported on first use (PEP 562): the package imports none of its
heavier modules until one of their names is asked for.

    _LAZY = {"Client": "jetsdk.client", ...}           # name -> the module it lives in
    __getattr__, __dir__ = lazy_names(globals(), _LAZY)

(``jetsdk``: ``import jetsdk.codec`` for the server does not import the client;
``jetspark``: a Spark worker imports the module its pickled object names, not the package.)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    namespace: dict[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose globals are ``namespace``: a
    name of ``where`` is imported from its module on first use and kept in ``namespace``
    (asked for once); any other name raises AttributeError; ``dir()`` is ``__all__``."""
    package = namespace["__name__"]

    def get(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def listed() -> list[str]:
        return sorted(namespace["__all__"])

    return get, listed
