"""jet server: durable, replicated streams for NATS."""

__version__ = "0.1.0"
