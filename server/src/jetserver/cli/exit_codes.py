"""The exit codes of every ``jet`` command, the ones scripts can rely on (see
:mod:`jetserver.cli.main`)."""

from __future__ import annotations

EXIT_OK = 0
"""Success."""
EXIT_FAILED = 1
"""The operation failed (error ack, server error, timeout)."""
EXIT_USAGE = 2
"""Usage error (bad flags or arguments)."""
EXIT_UNREACHABLE = 3
"""Could not connect to any server."""
EXIT_INTERRUPTED = 130
"""Interrupted (SIGINT)."""
