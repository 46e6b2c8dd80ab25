"""Child process for test_sync_sigterm.py: a sync group consumer that gets SIGTERM.

Usage: ``python sigterm_child.py ADDRESS STREAM GROUP COUNT``. Reads COUNT messages in the
group, prints ``read COUNT``, then keeps iterating (blocked: nothing more arrives) until the
signal; prints ``closed`` once the ``with`` blocks have unwound.
"""

from __future__ import annotations

import sys

from jetsdk import sync
from jetsdk.group.member import MemberConfig

CFG = MemberConfig(session_timeout=30.0, heartbeat_interval=0.25, release_timeout=5.0)


def main() -> int:
    address, stream, group, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    try:
        with (
            sync.Client([address]) as client,
            sync.Consumer(client, stream, group=group, group_config=CFG) as consumer,
        ):
            for seen, _msg in enumerate(consumer, start=1):
                if seen == count:
                    print(f"read {seen}", flush=True)
    finally:
        print("closed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
