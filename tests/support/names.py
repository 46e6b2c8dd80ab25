"""Names no other test uses: streams, groups, tables on a server tests share."""

from __future__ import annotations

import itertools
import uuid

_names = itertools.count()


def unique(prefix: str) -> str:
    """``prefix`` with a process-wide counter and a random suffix (unique across the test
    workers that share a server, and across reruns on a server that kept its data)."""
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"
