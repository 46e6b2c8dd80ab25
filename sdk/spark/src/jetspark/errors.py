"""jetspark's exceptions: one root, :class:`JetSparkError`, and a few families below it.

Errors raised inside Spark (the driver-side source runner, executors) reach the user
wrapped in Spark's own exception; the message text is kept, so every message here names
what went wrong (the option, the column, the stream and partition) on its own.

Every class pickles with its attributes (Spark ships exceptions between processes).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ColumnError", "DataLossError", "JetSparkError", "OptionError", "SinkWriteError"]


class JetSparkError(Exception):
    """Root of every jetspark exception."""


class OptionError(JetSparkError, ValueError):
    """A missing, unknown or malformed option; ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"jetstream option {option!r}: {message}")
        self.option = option
        """The option's name as documented (spec/spark.md)."""
        self.reason = message
        """What is wrong with it."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.option, self.reason))


class ColumnError(JetSparkError, ValueError):
    """A DataFrame written to a stream has a missing or mistyped column; ``column`` names it."""

    def __init__(self, column: str, message: str) -> None:
        super().__init__(f"jetstream sink column {column!r}: {message}")
        self.column = column
        """The column's name."""
        self.reason = message
        """What is wrong with it."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.column, self.reason))


class DataLossError(JetSparkError):
    """Records the query had not read yet are gone (retention, a deleted stream, a log
    truncated below the checkpointed offset). Raised only with ``failOnDataLoss=true``;
    compaction gaps are never data loss."""

    def __init__(self, stream: str, partition: int, message: str) -> None:
        super().__init__(
            f"data loss in {stream}/{partition}: {message} "
            "(set option failOnDataLoss=false to skip what is gone and go on)"
        )
        self.stream = stream
        """Stream name."""
        self.partition = partition
        """Partition number."""
        self.reason = message
        """What is gone."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stream, self.partition, self.reason))


class SinkWriteError(JetSparkError):
    """The server refused or failed messages of a write (after the SDK's retries)."""

    def __init__(self, stream: str, partition: int, message: str) -> None:
        super().__init__(f"writing to {stream}/{partition} failed: {message}")
        self.stream = stream
        """Stream name."""
        self.partition = partition
        """Partition number."""
        self.reason = message
        """The server's or the SDK's error."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.stream, self.partition, self.reason))
