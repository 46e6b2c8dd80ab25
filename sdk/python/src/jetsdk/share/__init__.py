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

from jetsdk.share.member import Handout, LostOutcome, ShareConfig, ShareMember
from jetsdk.share.pace import RateMeter
from jetsdk.share.records import Claim, Settings, Settle, decode_share_record, encode_share_record
from jetsdk.share.state import ShareState

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
