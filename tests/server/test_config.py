"""Configuration: defaults, TOML file, JET_* environment, flags, and their precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetsdk.transport import DEFAULT_PORT
from jetserver.cli.server_cmd import config_from_args
from jetserver.config.load import load_config
from jetserver.config.server import ServerConfig
from jetserver.errors import ConfigError
from support.jet_server import server_args


def test_defaults() -> None:
    cfg = load_config()
    assert cfg == ServerConfig()
    assert cfg.listen.port == DEFAULT_PORT == 9292
    assert cfg.listen.host == "127.0.0.1"
    assert cfg.limits.max_message_bytes == 1024 * 1024


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    conf = tmp_path / "jet.toml"
    conf.write_text(
        '[listen]\nport = 1111\nhost = "0.0.0.0"\n'
        '[nats]\nservers = ["nats://file:4222"]\nreconnect_wait_s = 1\n'
        "[limits]\nmax_message_bytes = 5000\n"
    )
    env = {"JET_LISTEN_PORT": "2222", "JET_NATS_SERVERS": "nats://a:1,nats://b:2"}
    cfg = config_from_args(server_args("--config", str(conf)), env)
    assert cfg.listen.port == 2222  # env beats file
    assert cfg.listen.host == "0.0.0.0"  # file beats default
    assert cfg.nats.servers == ("nats://a:1", "nats://b:2")
    assert cfg.nats.reconnect_wait_s == 1.0  # int accepted for float seconds
    assert cfg.limits.max_message_bytes == 5000
    cfg = config_from_args(
        server_args("--config", str(conf), "--port", "3333", "--nats", "nats://x:1,nats://y:2"), env
    )
    assert cfg.listen.port == 3333  # flag beats env
    assert cfg.nats.servers == ("nats://x:1", "nats://y:2")


def test_config_file_from_env(tmp_path: Path) -> None:
    conf = tmp_path / "jet.toml"
    conf.write_text("[server]\nid = 's9'\n")
    cfg = load_config(None, {"JET_CONFIG": str(conf)})
    assert cfg.server.id == "s9"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[listen]\nprot = 1\n", "unknown key 'prot'"),
        ("[lisen]\nport = 1\n", "unknown section [lisen]"),
        ("[listen]\nport = 'x'\n", "expected an integer"),
        ("[listen]\nport = 70000\n", "port must be within"),
        ("[fetch]\nio = 'mmap'\n", "io must be one of"),
        ("[nats]\ntls_cert = 'c.pem'\n", "tls_cert and nats.tls_key go together"),
        ("[limits]\nmax_message_bytes = 0\n", "must be > 0"),
        ("not toml ===", "not valid TOML"),
    ],
)
def test_bad_file_values_are_named(tmp_path: Path, text: str, fragment: str) -> None:
    conf = tmp_path / "jet.toml"
    conf.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(conf)
    assert fragment in str(info.value)


def test_bad_env_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {"JET_LISTEN_PORT": "abc"})
    assert "JET_LISTEN_PORT" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(None, {"JET_LISTEN_PROT": "1"})
    assert "listen.prot" in str(info.value)
    # Unrelated JET_* variables (other sections' prefixes) are ignored.
    assert load_config(None, {"JET_SOMETHING": "x"}) == ServerConfig()


def test_bool_and_optional_from_env() -> None:
    cfg = load_config(None, {"JET_NATS_TOKEN": "", "JET_LOGGING_LEVEL": "debug"})
    assert cfg.nats.token is None
    assert cfg.logging.level == "debug"


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(Path("/nonexistent/jet.toml"))
    assert "cannot read" in str(info.value)


def test_print_config_round_trips(tmp_path: Path) -> None:
    from jetserver.config.load import to_toml

    cfg = load_config(
        None,
        {"JET_NATS_SERVERS": "nats://a:1,nats://b:2", "JET_NATS_TOKEN": "secret"},
        {("listen", "port"): 0, ("fetch", "io"): "read"},
    )
    text = to_toml(cfg)
    assert 'token = "***"' in text
    assert "secret" not in text
    conf = tmp_path / "out.toml"
    conf.write_text(to_toml(cfg, show_secrets=True))
    assert load_config(conf) == cfg


def test_print_config_round_trips_strings_toml_must_escape(tmp_path: Path) -> None:
    """Quotes, backslashes, control characters and DEL in a string setting come back as
    they were (the old writer left a newline bare: not TOML)."""
    from jetserver.config.load import to_toml

    token = 'a"b\\c\nd\te\x7ff\u00e9'
    cfg = load_config(None, {"JET_NATS_TOKEN": token}, {("listen", "port"): 0})
    conf = tmp_path / "out.toml"
    conf.write_text(to_toml(cfg, show_secrets=True))
    assert load_config(conf).nats.token == token


def test_old_millisecond_limit_keys_still_work(tmp_path: Path) -> None:
    """Durations are float seconds; the old ``_ms`` limit keys are read and converted."""
    path = tmp_path / "jet.toml"
    path.write_text("[limits]\nmax_fetch_wait_ms = 1500\n")
    cfg = load_config(path, env={"JET_LIMITS_MAX_PRODUCE_TIMEOUT_MS": "2500"})
    assert cfg.limits.max_fetch_wait_s == 1.5
    assert cfg.limits.max_produce_timeout_s == 2.5
    path.write_text("[limits]\nmax_fetch_wait_s = 0.25\n")
    assert load_config(path).limits.max_fetch_wait_s == 0.25
    path.write_text('[limits]\nmax_fetch_wait_ms = "soon"\n')
    with pytest.raises(ConfigError, match="max_fetch_wait_ms must be a number"):
        load_config(path)


def test_disk_space_settings(tmp_path: Path) -> None:
    """[storage] disk_free_floor_bytes / disk_reserve_bytes: None (a default from the file
    system's size) unless set; 0 turns them off; negatives are refused; the flag wins."""
    assert load_config().storage.disk_free_floor_bytes is None
    assert load_config().storage.disk_reserve_bytes is None
    conf = tmp_path / "jet.toml"
    conf.write_text("[storage]\ndisk_free_floor_bytes = 0\ndisk_reserve_bytes = 1048576\n")
    cfg = load_config(conf)
    assert cfg.storage.disk_free_floor_bytes == 0
    assert cfg.storage.disk_reserve_bytes == 1048576
    env = {"JET_STORAGE_DISK_FREE_FLOOR_BYTES": "5000"}
    assert load_config(conf, env).storage.disk_free_floor_bytes == 5000
    cfg = config_from_args(server_args("--config", str(conf), "--disk-free-floor-bytes", "7"), env)
    assert cfg.storage.disk_free_floor_bytes == 7
    conf.write_text("[storage]\ndisk_free_floor_bytes = -1\n")
    with pytest.raises(ConfigError, match="disk_free_floor_bytes"):
        load_config(conf)
