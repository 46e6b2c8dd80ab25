"""``jet stream edit`` and ``jet stream purge`` (UpdateStream and PurgeStream,
spec/protocol.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from jetsdk import Client
from jetserver.cli.exit_codes import EXIT_OK, EXIT_USAGE
from jetserver.cli.stream_cmd import (
    STREAM_SETTINGS,
    client_command,
    fail,
    nonnegative_int,
    positive_int,
    print_json,
    run_with_client,
)

__all__ = ["register"]

_YES = frozenset({"yes", "true", "on", "1"})
_NO = frozenset({"no", "false", "off", "0"})


def yes_no(text: str) -> bool:
    """argparse type: ``yes`` or ``no`` (also true/false, on/off, 1/0)."""
    word = text.strip().lower()
    if word in _YES or word in _NO:
        return word in _YES
    raise argparse.ArgumentTypeError(f"not yes or no: {text!r}")


_EDITABLE: tuple[tuple[str, Callable[[str], Any], str, str], ...] = (
    *STREAM_SETTINGS,
    (
        "no_nats_copies",
        yes_no,
        "yes|no",
        "yes: produced records are no longer republished to NATS (1 replica, no group)",
    ),
    ("partitions", positive_int, "N", "refused: an existing stream keeps its partitions"),
    ("replication_factor", positive_int, "R", "refused: an existing stream keeps it"),
)
"""(setting, parser, metavar, help) of each ``jet stream edit`` option."""

_UNSET = object()


def register(subparsers: Any) -> None:
    """Add ``jet stream edit`` and ``jet stream purge`` to ``jet stream`` (registered
    before by :mod:`jetserver.cli.stream_cmd`)."""
    sub = subparsers.choices["stream"].get_default("stream_subcommands")
    edit = sub.add_parser(
        "edit",
        help="change a stream's retention, segment and message-size settings",
        description="Change settings of an existing stream; every replica applies them to "
        "its open logs (retention at its next run, segment sizes and the message limit at "
        "the next append). Partitions and replication factor cannot change.",
    )
    edit.add_argument("name", metavar="NAME")
    for setting, parse, metavar, text in _EDITABLE:
        edit.add_argument(
            "--" + setting.replace("_", "-"),
            dest=setting,
            type=parse,
            metavar=metavar,
            default=_UNSET,
            help=text,
        )
    client_command(edit, _edit, json_help="print the stream as JSON")

    purge = sub.add_parser(
        "purge",
        help="drop a stream's records",
        description="Drop the committed records of every partition (or of --partition) "
        "below --before (default: all of them), on every replica. New records keep "
        "their offsets after the last one.",
    )
    purge.add_argument("name", metavar="NAME")
    purge.add_argument("--partition", type=nonnegative_int, metavar="P", help="only this one")
    purge.add_argument("--before", type=nonnegative_int, metavar="OFFSET", help="keep from here")
    client_command(purge, _purge, json_help="print {partition: log start}")


def _edit(args: argparse.Namespace) -> int:
    settings = {s: getattr(args, s) for s, *_ in _EDITABLE if getattr(args, s) is not _UNSET}
    if not settings:
        return fail("jet stream edit: name at least one setting to change (see --help)", EXIT_USAGE)

    async def body(client: Client) -> int:
        info = await client.update_stream(args.name, **settings)
        if args.json:
            print_json(info.to_json())
        else:
            changed = ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))
            print(f"stream {info.name} updated: {changed}")
        return EXIT_OK

    return run_with_client(args, body)


def _purge(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        starts = await client.purge_stream(args.name, args.partition, args.before)
        if args.json:
            print_json({str(p): s for p, s in starts.items()})
        else:
            for p, start in sorted(starts.items()):
                print(f"stream {args.name} partition {p}: records before {start} purged")
        return EXIT_OK

    return run_with_client(args, body)
