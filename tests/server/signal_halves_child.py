"""Child of test_stop_signals: one SIGINT delivered in its two halves, a SIGTERM between.

A delivery is the C handler's byte on the event loop's wake-up socket and, later, the
Python-level handler's call in the main thread. Here the handler's half of a SIGINT comes
first, then a whole SIGTERM (its byte wakes the loop, which reads the socket and runs the
handlers), then the SIGINT's byte: the order in which a busy machine can deliver a SIGINT
whose sending thread is preempted between the two halves, or a loop preempted between its
read and the handlers. Prints the signals :func:`jetserver.cli.server_cmd.stop_signals`
yields, one name a line. Usage: signal_halves_child.py uvloop|asyncio
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from jetserver.cli.server_cmd import stop_signals

SETTLE_S = 0.5
"""How long to wait for a signal after the last one expected."""


async def main() -> None:
    with stop_signals() as signals:
        received: list[int] = []
        wakeup_fd = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(wakeup_fd)
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        handler(signal.SIGINT, None)  # the SIGINT's Python-level half
        os.kill(os.getpid(), signal.SIGTERM)  # a whole SIGTERM
        with anyio.fail_after(10):
            async for signum in signals:
                received.append(signum)
                break
        os.write(wakeup_fd, bytes([signal.SIGINT]))  # the SIGINT's byte
        with anyio.move_on_after(SETTLE_S):
            async for signum in signals:
                received.append(signum)
    for signum in received:
        print(signal.Signals(signum).name, flush=True)


if __name__ == "__main__":
    anyio.run(main, backend="asyncio", backend_options={"use_uvloop": sys.argv[1] == "uvloop"})
