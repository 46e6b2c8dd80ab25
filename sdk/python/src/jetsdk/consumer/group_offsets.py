"""Deprecated: the old name of :mod:`jetsdk.consumer.group_admin` (a group's committed
offsets from outside the group). Importing it warns; everything is re-exported."""

from __future__ import annotations

import warnings

from jetsdk.consumer.group_admin import (
    DEFAULT_COMMITTER,
    PartitionLag,
    commit_offsets,
    group_lag,
    group_offsets,
    read_group,
)

__all__ = [
    "DEFAULT_COMMITTER",
    "PartitionLag",
    "commit_offsets",
    "group_lag",
    "group_offsets",
    "read_group",
]

warnings.warn(
    "jetsdk.consumer.group_offsets is now jetsdk.consumer.group_admin",
    DeprecationWarning,
    stacklevel=2,
)
