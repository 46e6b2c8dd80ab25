"""Building frozen, slotted attrs values on hot paths without their ``__init__``.

attrs' frozen ``__init__`` sets each field through ``object.__setattr__``, about 3x the
cost of setting the slot directly. A hot path (decoding records, the producer's
per-message values) gets the slots' setters once with :func:`slot_setters` and writes a
small builder that calls them on ``object.__new__(cls)``. No converters or validators run:
the arguments must be valid already.

Pure; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["slot_setters"]

SlotSetter = Callable[[Any, Any], None]


def slot_setters(cls: type, *names: str) -> tuple[SlotSetter, ...]:
    """The setters of ``cls``'s slots ``names``, in order."""
    return tuple(getattr(cls, name).__set__ for name in names)
