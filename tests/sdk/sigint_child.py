"""Child process for test_sync_sigint.py: block in one sync call, get Ctrl-C, close.

Usage: ``python sigint_child.py ADDRESS STREAM CALL``. Prints ``blocking`` just before the
call, then on KeyboardInterrupt ``interrupted <seconds since the signal>``, and once the
``with`` blocks it propagates through (and the client) are closed, ``closed <seconds>``.
"""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType

from jetsdk import AckPolicy, sync

received: list[float] = []
interrupted: list[float] = []


def on_sigint(signum: int, frame: FrameType | None) -> None:
    received.append(time.monotonic())
    signal.default_int_handler(signum, frame)


def blocking_call(client: sync.Client, stream: str, call: str) -> None:
    if call in ("iterate", "fetch"):
        with sync.Consumer(client, stream, start="new-only") as consumer:
            print("blocking", flush=True)
            try:
                if call == "iterate":
                    for _msg in consumer:
                        pass
                else:
                    consumer.fetch(timeout=None)
            except KeyboardInterrupt:
                interrupted.append(time.monotonic())
                raise
    else:
        with sync.Producer(client, stream, ack=AckPolicy.ALL, delivery_timeout=600) as producer:
            print("blocking", flush=True)
            try:
                if call == "send":
                    producer.send(b"x")
                else:
                    producer.send_soon(b"x")
                    producer.flush()
            except KeyboardInterrupt:
                interrupted.append(time.monotonic())
                raise


def main() -> int:
    address, stream, call = sys.argv[1], sys.argv[2], sys.argv[3]
    signal.signal(signal.SIGINT, on_sigint)
    try:
        with sync.Client([address], request_timeout=600) as client:
            blocking_call(client, stream, call)
    except KeyboardInterrupt:
        if not interrupted:
            print("interrupted elsewhere", flush=True)
            return 1
        print(f"interrupted {interrupted[0] - received[0]:.3f}", flush=True)
        print(f"closed {time.monotonic() - interrupted[0]:.3f}", flush=True)
        return 0
    print("not interrupted", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
