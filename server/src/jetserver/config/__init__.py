"""The server's configuration: its sections (:mod:`.server`), how it is loaded from TOML, the
environment and flags (:mod:`.load`), and the validators every package's section uses
(:mod:`.validators`)."""
