"""The SDK version (kept apart so any module can import it without cycles)."""

__version__ = "0.1.0"
PROTOCOL_VERSION = 1
"""Client protocol version this SDK speaks (spec/protocol.md)."""
