"""A stand-in for the `nats` CLI's ``pub`` and ``req``, written with nats-py, for the docs'
shell examples where the real CLI (https://github.com/nats-io/natscli) is not installed.

    python nats_cli.py pub SUBJECT BODY [-H 'Name: value']...
    python nats_cli.py req SUBJECT BODY [-H 'Name: value']... [--timeout S]

The server comes from ``--server`` or ``$NATS_URL``, as for the real CLI. ``req`` prints the
reply's body (the real CLI prints two lines of timing before it); a missing reply exits 1.
Repeated header names keep only the last value (nats-py takes a dict).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from jetserver.testing import nats_flushed

DEFAULT_URL = "nats://127.0.0.1:4222"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nats")
    parser.add_argument("--server", "-s", default=os.environ.get("NATS_URL", DEFAULT_URL))
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("pub", "req"):
        command = commands.add_parser(name)
        command.add_argument("subject")
        command.add_argument("body", nargs="?", default="")
        command.add_argument("-H", "--header", action="append", default=[])
        command.add_argument("--timeout", type=float, default=5.0)
    return parser.parse_args(argv)


def headers(lines: list[str]) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise SystemExit(f"nats: header {line!r} is not 'Name: value'")
        out[name.strip()] = value.strip()
    return out or None


async def main(args: argparse.Namespace) -> int:
    nc = await nats.connect(args.server, connect_timeout=5, allow_reconnect=False)
    try:
        body, hdrs = args.body.encode(), headers(args.header)
        if args.command == "pub":
            await nc.publish(args.subject, body, headers=hdrs)
            await nats_flushed(nc, args.timeout)
            print(f'Published {len(body)} bytes to "{args.subject}"')
            return 0
        try:
            reply = await nc.request(args.subject, body, timeout=args.timeout, headers=hdrs)
        except (NatsTimeout, NoRespondersError) as exc:
            print(f"nats: no reply on {args.subject}: {exc!r}", file=sys.stderr)
            return 1
        print(reply.data.decode(errors="replace"))
        return 0
    finally:
        await nc.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
