"""Share groups: queues on the log (spec/share-groups.md), the pure core.

- :mod:`~jetsdk.share.records`: share-log records and their JSON;
- :mod:`~jetsdk.share.state`: :class:`ShareState`, the state machine every member runs;
- :mod:`~jetsdk.share.member`: :class:`ShareMember`, one member's decisions (what
  :class:`jetsdk.ShareConsumer` drives);
- :mod:`~jetsdk.share.pace`: :class:`RateMeter`, the application's measured rate that sizes
  what a member acquires;
- :mod:`~jetsdk.share.simulation`: a seeded simulation with its checks (a test kit; not
  imported here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetsdk.lazy_names import lazy_names

if TYPE_CHECKING:
    from jetsdk.share.member import Handout, LostOutcome, ShareConfig, ShareMember
    from jetsdk.share.pace import RateMeter
    from jetsdk.share.records import (
        Claim,
        Settings,
        Settle,
        decode_share_record,
        encode_share_record,
    )
    from jetsdk.share.state import ShareState

_LAZY = {
    "Handout": "jetsdk.share.member",
    "LostOutcome": "jetsdk.share.member",
    "ShareConfig": "jetsdk.share.member",
    "ShareMember": "jetsdk.share.member",
    "RateMeter": "jetsdk.share.pace",
    "Claim": "jetsdk.share.records",
    "Settings": "jetsdk.share.records",
    "Settle": "jetsdk.share.records",
    "decode_share_record": "jetsdk.share.records",
    "encode_share_record": "jetsdk.share.records",
    "ShareState": "jetsdk.share.state",
}
"""Imported on first use: the server imports the records module (its gate reads share-log
records), not the member's state machine."""

__getattr__, __dir__ = lazy_names(globals(), _LAZY)

__all__ = [
    "Claim",
    "Handout",
    "LostOutcome",
    "RateMeter",
    "Settings",
    "Settle",
    "ShareConfig",
    "ShareMember",
    "ShareState",
    "decode_share_record",
    "encode_share_record",
]
