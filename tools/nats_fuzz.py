"""The long NATS ingest fuzz campaign (issue 31): a fresh nats-server and jet server, then
:func:`jetserver.testing.nats_fuzz.run_fuzz` with raw-socket publishers; prints the report.

    nox -s fuzz_nats -- --messages 1000000            # the campaign of issue 31
    python tools/nats_fuzz.py --messages 20000 --seed 7

Exit status 0 if every message sent to a stream was stored exactly once, intact and in
order, nothing else was stored, the canary never waited over ``--stall-ms`` (but within
1 s of a slow fsync on the server's event loop: the disk's wait, reported apart) and the
server still serves; 1 otherwise. The server's log is kept (its path is printed).
"""

from __future__ import annotations

import argparse
import inspect
import random
import sys
import tempfile
import time
from pathlib import Path

import anyio

from jetserver.testing import JetServer, NatsServer, server_config
from jetserver.testing.nats_fuzz import STALL_BOUND_S, run_fuzz

KNOBS = {
    "streams": "",
    "publishers": "",
    "round_size": "",
    "rate": "messages/s, 0: max",
}
"""The :func:`run_fuzz` parameters this tool sets from options, with their help (the
defaults are :func:`run_fuzz`'s)."""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=None, help="default: from the clock")
    for name, param in inspect.signature(run_fuzz).parameters.items():
        if name in KNOBS:
            option = "--" + name.replace("_", "-")
            parser.add_argument(
                option, type=type(param.default), default=param.default, help=KNOBS[name]
            )
    parser.add_argument("--stall-ms", type=float, default=STALL_BOUND_S * 1000)
    parser.add_argument(
        "--fsync-in-threads",
        action="store_true",
        help="the server's fsyncs never on its event loop ([storage] fsync_on_loop = false):\n"
        "canary stalls are then not a slow disk's",
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new temp dir")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    knobs = {name: getattr(args, name) for name in KNOBS}
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="jet-nats-fuzz-"))
    print(
        f"nats fuzz: seed {seed}, {args.messages} messages, rate {args.rate}/s, fsync on the "
        f"server's loop {not args.fsync_in_threads}, work dir {work}",
        flush=True,
    )
    with NatsServer() as nats:
        root = work / "s1"
        settings = {"storage": {"fsync_on_loop": False}} if args.fsync_in_threads else None
        config = server_config("s1", root, nats.url, log_level="INFO", settings=settings)
        server = JetServer("s1", root, config)
        server.start()
        try:
            started = time.monotonic()
            report = anyio.run(
                lambda: run_fuzz(
                    nats.url,
                    server.address,
                    messages=args.messages,
                    seed=seed,
                    server_log=server.log_path,
                    progress=True,
                    **knobs,
                ),
                backend="asyncio",
            )
            alive = server.alive
        finally:
            server.stop()
    bound = args.stall_ms / 1000
    for line in report.lines(bound):
        print(line)
    print(f"  jet server alive at the end: {alive}; log {server.log_path}")
    print(f"  wall time {time.monotonic() - started:.1f} s")
    return 0 if report.ok(bound) and alive else 1


if __name__ == "__main__":
    sys.exit(main())
