"""jetsdk: the Python SDK for jet streams."""

__version__ = "0.1.0"
