"""attrs validators for configuration values; every failure is a :class:`ConfigError`.

One definition for every configuration class (``config.py``, ``raft/config.py``,
``replication/config.py``, ``storage/config.py``). Messages name the setting as
``<section>.<name>`` when the validator is built with a section. ``ConfigError`` is also
a ``ValueError``, so callers of the storage engine that catch ``ValueError`` still do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from jetserver.errors import ConfigError

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]

__all__ = [
    "at_most",
    "int_in",
    "non_negative",
    "one_of",
    "optional",
    "optional_non_negative",
    "positive",
    "positive_int",
]


def _name(section: str, attribute: attrs.Attribute[Any]) -> str:
    return f"{section}.{attribute.name}" if section else attribute.name


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive(section: str = "", *, maximum: float | None = None) -> Validator:
    """A number > 0 (NaN refused), and at most ``maximum`` if given."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not _is_number(value) or not value > 0:
            raise ConfigError(f"{_name(section, attribute)} must be > 0, got {value!r}")
        if maximum is not None and value > maximum:
            raise ConfigError(
                f"{_name(section, attribute)} must be at most {maximum:g}, got {value!r}"
            )

    return check


def non_negative(section: str = "") -> Validator:
    """A number >= 0 (NaN refused)."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not _is_number(value) or not value >= 0:
            raise ConfigError(f"{_name(section, attribute)} must be >= 0, got {value!r}")

    return check


def at_most(maximum: float, section: str = "") -> Validator:
    """A number in ``[0, maximum]`` (NaN and infinities refused)."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not _is_number(value) or not 0 <= value <= maximum:
            raise ConfigError(
                f"{_name(section, attribute)} must be >= 0 and at most {maximum:g}, got {value!r}"
            )

    return check


def int_in(minimum: int, maximum: int, section: str = "") -> Validator:
    """An int in [``minimum``, ``maximum``] (bool refused)."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
            raise ConfigError(
                f"{_name(section, attribute)} must be an int in [{minimum}, {maximum}], "
                f"got {value!r}"
            )

    return check


def optional(inner: Validator) -> Validator:
    """None, or what ``inner`` accepts."""

    def check(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None:
            inner(inst, attribute, value)

    return check


def optional_non_negative(section: str = "") -> Validator:
    """None, or a number >= 0."""
    inner = non_negative(section)

    def check(inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None:
            inner(inst, attribute, value)

    return check


def positive_int(limit: int, section: str = "") -> Validator:
    """An int in [1, ``limit``]."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
            raise ConfigError(
                f"{_name(section, attribute)} must be an int in [1, {limit}], got {value!r}"
            )

    return check


def one_of(*choices: str, section: str = "") -> Validator:
    """One of the strings ``choices``."""

    def check(_inst: Any, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in choices:
            raise ConfigError(
                f"{_name(section, attribute)} must be one of {list(choices)}, got {value!r}"
            )

    return check
