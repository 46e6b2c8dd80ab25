"""Child process for test_sync_sigint.py: block in one sync call, get Ctrl-C, close.

Usage: ``python sigint_child.py ADDRESS STREAM CALL``. Prints ``blocking`` just before the
call (``send`` and ``flush`` then wait for ``go`` on stdin: the parent has stopped the
server), ``blocked`` once the main thread waits inside it (a watcher thread sees the main
thread's innermost frame in a ``threading`` wait or a send handle's wait), then on KeyboardInterrupt
``interrupted <seconds since the signal>``, and once the ``with`` blocks it propagates
through (and the client) are closed, ``closed <seconds>``.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from types import FrameType

from jetsdk import AckPolicy, sync

received: list[float] = []
interrupted: list[float] = []
WATCH_BOUND_S = 60.0
"""Bound on the watcher's wait for the main thread to block."""


def waiting_in_call(main: int) -> bool:
    """The main thread is inside the sync call of ``blocking_call`` and its innermost Python
    frame is a ``threading`` wait (a condition or event: the sync API's wait for its loop
    thread) or a sync send handle's ``result``, not the wait for this watcher to start."""
    frame = sys._current_frames().get(main)
    if frame is None:
        return False
    code = frame.f_code
    in_wait = code.co_filename.endswith("threading.py") and code.co_name == "wait"
    # A sync send handle waits on its own lock: SendHandle.result is the innermost frame.
    in_result = code.co_filename.endswith("_sync_sends.py") and code.co_name == "result"
    if not (in_wait or in_result):
        return False
    while frame is not None:
        if frame.f_code.co_name == "watch_main_thread":
            return False  # waiting for the watcher itself to start
        if frame.f_code.co_name == "blocking_call":
            return True
        frame = frame.f_back
    return False


def report_blocked(main: int) -> None:
    """Print ``blocked`` once the main thread waits in the call (bounded)."""
    deadline = time.monotonic() + WATCH_BOUND_S
    while time.monotonic() < deadline:
        if waiting_in_call(main):
            print("blocked", flush=True)
            return
        time.sleep(0.005)


def on_sigint(signum: int, frame: FrameType | None) -> None:
    received.append(time.monotonic())
    signal.default_int_handler(signum, frame)


def watch_main_thread() -> None:
    main = threading.main_thread().ident
    assert main is not None
    threading.Thread(target=report_blocked, args=(main,), daemon=True).start()


def blocking_call(client: sync.Client, stream: str, call: str) -> None:
    if call in ("iterate", "fetch"):
        with sync.Consumer(client, stream, start="new-only") as consumer:
            print("blocking", flush=True)
            watch_main_thread()
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
            # The parent stops the server, then says "go": the message cannot be
            # acknowledged before the call blocks.
            if sys.stdin.readline().strip() != "go":
                raise SystemExit("the parent did not say go")
            watch_main_thread()
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
