"""The jetspark version: the one source the package metadata reads (pyproject.toml)."""

__version__ = "0.1.0"
