"""``jet table get|put|delete|watch``: a compacted stream as a key-value table
(:class:`jetsdk.Table`; keys and values are given and printed as UTF-8 text).

    jet table put prices AAPL 189.5              # prints the revision
    jet table put prices AAPL 190.1 --revision 7 # compare-and-set
    jet table put prices MSFT 410 --create       # only if absent
    jet table put locks job-7 me --create --ttl 30   # a lock that frees itself
    jet table get prices AAPL                    # prints the value
    jet table delete prices AAPL
    jet table watch prices --prefix AA --count 10

A refused compare-and-set exits 1 and names the key's current revision.
"""

from __future__ import annotations

import argparse
from contextlib import aclosing
from typing import Any

from jetsdk import Client, Table, WrongExpectedKeyOffset
from jetsdk.table import Change
from jetserver.cli.exit_codes import EXIT_FAILED, EXIT_OK
from jetserver.cli.stream_cmd import (
    add_command_group,
    client_command,
    fail,
    nonnegative_int,
    positive_float,
    positive_int,
    print_json,
    run_with_client,
)

__all__ = ["register"]


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode(errors="backslashreplace")


def register(subparsers: Any) -> None:
    _, sub = add_command_group(
        subparsers,
        "table",
        help="a compacted stream as a key-value table",
        description="Get, put, delete and watch keys of a compacted stream (jetsdk.Table).",
        metavar="COMMAND",
    )

    get = sub.add_parser("get", help="print a key's value", description="Print a key's value.")
    get.add_argument("stream")
    get.add_argument("key")
    client_command(get, _get, json_help="print key, value and revision")

    put = sub.add_parser("put", help="set a key", description="Set a key; print its revision.")
    put.add_argument("stream")
    put.add_argument("key")
    put.add_argument("value")
    how = put.add_mutually_exclusive_group()
    how.add_argument(
        "--revision", type=nonnegative_int, help="only if the key is at this revision (CAS)"
    )
    how.add_argument("--create", action="store_true", help="only if the key has no value")
    put.add_argument(
        "--ttl", type=positive_float, metavar="SECONDS", help="the key expires after this long"
    )
    client_command(put, _put)

    delete = sub.add_parser("delete", help="delete a key", description="Delete a key.")
    delete.add_argument("stream")
    delete.add_argument("key")
    client_command(delete, _delete)

    watch = sub.add_parser(
        "watch",
        help="print changes as they happen",
        description="Print the current entries, then every change (Ctrl-C to stop).",
    )
    watch.add_argument("stream")
    watch.add_argument("--prefix", default="", help="only keys starting with this")
    watch.add_argument("--from-now", action="store_true", help="skip the current entries")
    watch.add_argument("--count", type=positive_int, help="stop after this many changes")
    client_command(watch, _watch, json_help="one JSON document per change")


def _get(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        async with Table(client, args.stream) as table:
            entry = table.entry(args.key.encode())
        if entry is None:
            return fail(f"no key {args.key!r} in {args.stream!r}", EXIT_FAILED)
        if args.json:
            print_json({"key": args.key, "value": _text(entry.value), "revision": entry.revision})
        else:
            print(_text(entry.value))
        return EXIT_OK

    return run_with_client(args, body)


def _put(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        key, value = args.key.encode(), args.value.encode()
        async with Table(client, args.stream) as table:
            try:
                if args.create:
                    revision = await table.create(key, value, ttl=args.ttl)
                elif args.revision is not None:
                    revision = await table.update(key, value, args.revision, ttl=args.ttl)
                else:
                    revision = await table.put(key, value, ttl=args.ttl)
            except WrongExpectedKeyOffset as exc:
                return fail(f"refused: {exc} (current revision {exc.current_revision})", 1)
        print(revision)
        return EXIT_OK

    return run_with_client(args, body)


def _delete(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        async with Table(client, args.stream) as table:
            print(await table.delete(args.key.encode()))
        return EXIT_OK

    return run_with_client(args, body)


def _watch(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        seen = 0
        async with Table(client, args.stream) as table:
            changes = table.watch(args.prefix.encode(), initial=not args.from_now)
            async with aclosing(changes):
                async for change in changes:
                    _print_change(change, args.json)
                    seen += 1
                    if args.count is not None and seen >= args.count:
                        break
        return EXIT_OK

    return run_with_client(args, body)


def _print_change(change: Change, as_json: bool) -> None:
    key, value = _text(change.key), _text(change.value)
    if as_json:
        doc = {"key": key, "value": value, "revision": change.revision, "initial": change.initial}
        if change.expired:
            doc["expired"] = True
        print_json(doc)
    elif change.expired:
        print(f"EXPIRED {key} @{change.revision}", flush=True)
    elif change.deleted:
        print(f"DEL {key} @{change.revision}", flush=True)
    else:
        print(f"PUT {key} = {value} @{change.revision}", flush=True)
