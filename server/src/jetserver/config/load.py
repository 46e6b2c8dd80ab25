"""Build a :class:`~jetserver.config.server.ServerConfig` from a TOML file, the environment
and flags.

Precedence, highest first: flags > environment (``JET_<SECTION>_<KEY>``, e.g.
``JET_LISTEN_PORT=9300``, ``JET_NATS_SERVERS=nats://a:4222,nats://b:4222``) > file > defaults.
The config file itself may be named with ``--config`` or ``JET_CONFIG``.

Unknown sections or keys in the file, and unknown ``JET_<SECTION>_*`` variables for a known
section, are errors: a typo must not silently fall back to a default.
"""

from __future__ import annotations

import logging
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import orjson

from jetserver.config.server import SECTIONS, ServerConfig
from jetserver.errors import ConfigError
from jetserver.logs import fields

log = logging.getLogger(__name__)

ENV_PREFIX = "JET_"
ENV_CONFIG_FILE = "JET_CONFIG"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})

Overrides = Mapping[tuple[str, str], Any]
"""(section, key) -> value, e.g. ``{("listen", "port"): 0}``."""


def _field_types(cls: type[Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in attrs.fields(cls)}


def _convert(value: Any, typ: Any, *, from_text: bool, source: str) -> Any:
    """Convert ``value`` to ``typ`` (int, float, str, bool, X | None, tuple[str, ...])."""
    origin = typing.get_origin(typ)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value is None or (from_text and value == ""):
            return None
        return _convert(value, args[0], from_text=from_text, source=source)
    if origin is tuple:
        if isinstance(value, str):
            items = [s.strip() for s in value.split(",") if s.strip()]
        elif isinstance(value, list | tuple):
            items = list(value)
        else:
            raise ConfigError(f"expected a list of strings, got {value!r}", source=source)
        if not all(isinstance(i, str) for i in items):
            raise ConfigError(f"expected a list of strings, got {value!r}", source=source)
        return tuple(items)
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ConfigError(f"expected true or false, got {value!r}", source=source)
    if typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""), 0)
            except ValueError:
                pass
        raise ConfigError(f"expected an integer, got {value!r}", source=source)
    if typ is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"expected a number (seconds), got {value!r}", source=source)
    if typ is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"expected a string, got {value!r}", source=source)
    raise ConfigError(f"unsupported config type {typ!r}", source=source)  # pragma: no cover


RENAMED_KEYS: dict[tuple[str, str], tuple[str, float]] = {
    ("limits", "max_produce_timeout_ms"): ("max_produce_timeout_s", 0.001),
    ("limits", "max_fetch_wait_ms"): ("max_fetch_wait_s", 0.001),
}
"""Old keys still read: ``(section, old key) -> (new key, factor to the new unit)``
(durations are float seconds everywhere; these were milliseconds)."""


def _renamed(section: str, key: str, value: Any, source: str) -> tuple[str, Any]:
    """``(key, value)`` under the current name (an old one is converted, with a warning)."""
    new = RENAMED_KEYS.get((section, key))
    if new is None:
        return key, value
    name, factor = new
    try:
        converted = float(value) * factor
    except (TypeError, ValueError):
        raise ConfigError(
            f"{section}.{key} must be a number, got {value!r}", source=source
        ) from None
    log.warning(
        "config key renamed; the old name still works",
        extra=fields(old=f"{section}.{key}", new=f"{section}.{name}", value=converted),
    )
    return name, converted


def read_config_file(path: Path) -> dict[str, dict[str, Any]]:
    """Parse a TOML config file into ``{section: {key: value}}`` (values not yet checked).

    Raises:
        ConfigError: unreadable file, bad TOML, unknown section or key.
    """
    source = f"file {path}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", source=source) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not valid TOML: {exc}", source=source) from None
    out: dict[str, dict[str, Any]] = {}
    for section, table in data.items():
        if section not in SECTIONS:
            raise ConfigError(
                f"unknown section [{section}] (known: {', '.join(SECTIONS)})", source=source
            )
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}] must be a table", source=source)
        known = _field_types(SECTIONS[section])
        values: dict[str, Any] = {}
        for key, value in table.items():
            name, value = _renamed(section, key, value, source)
            if name not in known:
                raise ConfigError(
                    f"unknown key {key!r} in [{section}] (known: {', '.join(known)})",
                    source=source,
                )
            values[name] = value
        out[section] = values
    return out


def env_overrides(env: Mapping[str, str]) -> dict[tuple[str, str], tuple[str, str]]:
    """``JET_<SECTION>_<KEY>`` variables as ``{(section, key): (text, variable name)}``.

    Raises:
        ConfigError: a ``JET_<SECTION>_`` variable names a key the section lacks.
    """
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for var, text in env.items():
        if not var.startswith(ENV_PREFIX) or var == ENV_CONFIG_FILE:
            continue
        rest = var[len(ENV_PREFIX) :].lower()
        for section in SECTIONS:
            if rest.startswith(section + "_"):
                key = rest[len(section) + 1 :]
                key, text = _renamed(section, key, text, f"env {var}")
                if key not in _field_types(SECTIONS[section]):
                    raise ConfigError(f"unknown setting {section}.{key}", source=f"env {var}")
                out[(section, key)] = (str(text), var)
                break
    return out


def load_config(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Overrides | None = None,
) -> ServerConfig:
    """Merge defaults, the file at ``path``, ``env`` and flag ``overrides``.

    Args:
        path: TOML file, or None (then ``env["JET_CONFIG"]`` if set).
        env: environment variables (pass ``os.environ``); None means none.
        overrides: values from flags, already typed or as text.

    Raises:
        ConfigError: any bad value, naming where it came from.
    """
    env = dict(env or {})
    if path is None and env.get(ENV_CONFIG_FILE):
        path = Path(env[ENV_CONFIG_FILE])
    file_values = read_config_file(path) if path is not None else {}
    env_values = env_overrides(env)
    sections: dict[str, Any] = {}
    for section, cls in SECTIONS.items():
        types_ = _field_types(cls)
        kwargs: dict[str, Any] = {}
        for key, typ in types_.items():
            if overrides is not None and (section, key) in overrides:
                value = overrides[(section, key)]
                source = f"flag for {section}.{key}"
                kwargs[key] = _convert(value, typ, from_text=isinstance(value, str), source=source)
            elif (section, key) in env_values:
                text, var = env_values[(section, key)]
                kwargs[key] = _convert(text, typ, from_text=True, source=f"env {var}")
            elif key in file_values.get(section, {}):
                kwargs[key] = _convert(
                    file_values[section][key], typ, from_text=False, source=f"file {path}"
                )
        try:
            sections[section] = cls(**kwargs)
        except ConfigError as exc:
            raise ConfigError(f"[{section}] {exc}") from None
    return ServerConfig(**sections)


SECRET_KEYS = frozenset(
    {
        ("nats", "password"),
        ("nats", "token"),
        ("cluster", "password"),
        ("auth", "internal_token"),
    }
)
"""Settings masked by :func:`to_toml` unless asked otherwise."""


def toml_value(value: Any) -> str:
    """``value`` as a TOML value: a bool, an int or float, a list or tuple of values, or a
    string (any other value as its ``str``), escaped as TOML reads it back (JSON's string
    escapes are TOML's; DEL, which JSON leaves bare and TOML refuses, as ``\\u007f``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return orjson.dumps(str(value)).decode().replace("\x7f", "\\u007f")


def to_toml(config: ServerConfig, *, show_secrets: bool = False) -> str:
    """The configuration as a TOML file that :func:`load_config` reads back (unset optional
    values are written as comments; secrets are masked unless ``show_secrets``)."""
    lines: list[str] = []
    for section in SECTIONS:
        lines.append(f"[{section}]")
        values = attrs.asdict(getattr(config, section), recurse=False)
        for key, value in values.items():
            if value is None:
                lines.append(f"# {key} =")
            elif (section, key) in SECRET_KEYS and not show_secrets:
                lines.append(f'{key} = "***"')
            else:
                lines.append(f"{key} = {toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def settings_help(width: int = 100) -> str:
    """Every setting and its default, one wrapped paragraph per section (``jet server
    --help``)."""
    import textwrap

    defaults = ServerConfig()
    paragraphs = [
        textwrap.fill(
            "settings (TOML [section] key = value, or JET_<SECTION>_<KEY>; a flag above wins "
            "over both; --print-config shows the values in effect) and their defaults:",
            width=width,
            break_on_hyphens=False,
        )
    ]
    indent = 2 + max(len(section) for section in SECTIONS) + 3
    for section in SECTIONS:
        values = attrs.asdict(getattr(defaults, section), recurse=False)
        items = [
            f"{key}={'-' if value is None else toml_value(value)}" for key, value in values.items()
        ]
        head = f"  [{section}]".ljust(indent)
        paragraphs.append(
            textwrap.fill(
                " ".join(items),
                width=width,
                initial_indent=head,
                subsequent_indent=" " * indent,
                break_on_hyphens=False,
            )
        )
    return "\n".join(paragraphs)
