"""``jet pub`` and ``jet sub``: publish to a stream through a server, and read a stream.

``jet pub SUBJECT VALUE`` finds the stream partition whose subject matches SUBJECT
(wildcards included; the first stream by name if several match, or ``--stream``), sends the
message through the server's Produce API and prints where it was stored. An error ack or a
timeout exits with 1.

``jet sub STREAM`` prints one line per message (``--json``: one JSON object per line);
values are printed as UTF-8 (undecodable bytes replaced) or, in JSON, as base64 with
``"value_encoding": "base64"`` when they are not UTF-8.
"""

from __future__ import annotations

import argparse
import base64
import sys
from datetime import datetime
from typing import Any

import anyio

from jetsdk import Client, Consumer, Producer
from jetsdk.consumer.positions import StartAt, StartPosition
from jetsdk.message import Message
from jetsdk.partitioner import partition_for_key
from jetserver.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from jetserver.cli.progress import Progress
from jetserver.cli.stream_cmd import (
    ACK_POLICIES,
    add_ack_option,
    client_command,
    fail,
    nonnegative_int,
    positive_float,
    positive_int,
    print_json,
    run_with_client,
)


def register(subparsers: Any) -> None:
    """Add ``jet pub`` and ``jet sub``."""
    pub: argparse.ArgumentParser = subparsers.add_parser(
        "pub",
        help="publish a message to a stream",
        description="Publish VALUE on SUBJECT through a jet server and wait for the ack of "
        "the stream partition listening on SUBJECT. With --key on a stream's own subject, "
        "the key picks the partition as every jet client does (murmur2, spec/partitioning.md)"
        ". Prints stream, partition and offset.",
    )
    pub.add_argument("subject", metavar="SUBJECT", help="NATS subject (no wildcards)")
    pub.add_argument("value", metavar="VALUE", help="message value ('-' reads stdin)")
    pub.add_argument(
        "--key",
        help="message key (UTF-8); on the stream's subject it also picks the partition",
    )
    pub.add_argument(
        "--partition",
        type=nonnegative_int,
        metavar="P",
        help="send to partition P of the stream listening on SUBJECT (instead of the key's)",
    )
    pub.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header (repeatable)",
    )
    add_ack_option(pub)
    pub.add_argument("--stream", help="the stream to ack from, if several listen on SUBJECT")
    pub.add_argument(
        "--timeout",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for the ack (default 10)",
    )
    client_command(pub, _pub, json_help="print the ack as JSON")

    sub: argparse.ArgumentParser = subparsers.add_parser(
        "sub",
        help="print a stream's messages",
        description="Print the messages of STREAM, one per line, following new ones until "
        "--count messages were printed or Ctrl-C.",
    )
    sub.add_argument("stream", metavar="STREAM")
    sub.add_argument(
        "--partition",
        type=nonnegative_int,
        action="append",
        metavar="P",
        help="partition to read (repeatable; default: all)",
    )
    sub.add_argument(
        "--from",
        dest="start",
        default="earliest",
        metavar="POSITION",
        help="earliest (default), latest (the last message, then new ones), new-only, an "
        "offset, or an ISO-8601 time",
    )
    sub.add_argument(
        "--count",
        type=positive_int,
        metavar="N",
        help="stop after N messages (a progress bar on stderr when it is a terminal)",
    )
    sub.add_argument(
        "--idle-timeout",
        type=positive_float,
        metavar="SECONDS",
        help="stop when no message arrived for this long",
    )
    client_command(sub, _sub, json_help="one JSON object per line")


# -- jet pub ------------------------------------------------------------------------------


def _pub(args: argparse.Namespace) -> int:
    if "*" in args.subject.split(".") or ">" in args.subject.split("."):
        return fail(f"SUBJECT must not contain wildcards: {args.subject!r}", EXIT_USAGE)
    headers: list[tuple[str, str]] = []
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            return fail(f"--header must be NAME=VALUE, not {item!r}", EXIT_USAGE)
        headers.append((name, value))
    value = sys.stdin.buffer.read() if args.value == "-" else args.value.encode()
    key = None if args.key is None else args.key.encode()

    async def body(client: Client) -> int:
        targets = await client.streams_for_subject(args.subject)
        if args.stream is not None:
            targets = [t for t in targets if t[0].name == args.stream]
        if not targets:
            where = f"stream {args.stream!r} " if args.stream else "no stream "
            return fail(f"{where}listens on subject {args.subject!r}", EXIT_FAILED)
        info, partition = targets[0]
        if args.partition is not None:
            if args.partition >= info.partition_count:
                return fail(
                    f"stream {info.name!r} has {info.partition_count} partitions, no "
                    f"partition {args.partition}",
                    EXIT_USAGE,
                )
            partition = args.partition
        elif key is not None and args.subject == info.subject:
            # The stream's own subject: the key picks the partition, as in the SDK.
            partition = partition_for_key(key, info.partition_count)
        part = info.partitions[partition]
        # Another partition than SUBJECT's, or its own subject: the partition's subject.
        moved = partition != targets[0][1]
        subject = "" if moved or part.subject == args.subject else args.subject
        async with Producer(client, info.name, linger=0, ack_timeout=args.timeout) as producer:
            with anyio.fail_after(args.timeout + client.request_timeout):
                ack = await producer.send(
                    value,
                    key,
                    headers,
                    ack=ACK_POLICIES[args.ack],
                    partition=partition,
                    subject=subject,
                )
        if args.json:
            print_json(
                {
                    "stream": ack.stream,
                    "partition": ack.partition,
                    "offset": ack.offset,
                    "timestamp": ack.timestamp,
                }
            )
        elif ack.offset < 0:
            print(f"published to stream={ack.stream} partition={ack.partition} (no ack asked)")
        else:
            print(f"stream={ack.stream} partition={ack.partition} offset={ack.offset}")
        return EXIT_OK

    return run_with_client(args, body)


# -- jet sub ------------------------------------------------------------------------------


def parse_position(text: str) -> StartPosition:
    """``--from``: a position name, an offset, or an ISO-8601 time.

    Raises:
        ValueError: none of those.
    """
    names = {"earliest": StartAt.earliest, "latest": StartAt.latest, "new-only": StartAt.new_only}
    if text in names:
        return names[text]()
    if text.isdigit():
        return StartAt.offset(int(text))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--from must be earliest, latest, new-only, an offset or an ISO time: {text!r}"
        ) from None
    return StartAt.timestamp(moment)


def _sub(args: argparse.Namespace) -> int:
    try:
        start = parse_position(args.start)
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)

    async def body(client: Client) -> int:
        printed = 0
        progress = Progress(args.count) if args.count is not None else None
        try:
            async with Consumer(client, args.stream, partitions=args.partition, start=start) as c:
                while args.count is None or printed < args.count:
                    want = 5000 if args.count is None else min(5000, args.count - printed)
                    batch = await c.fetch(max_records=want, timeout=args.idle_timeout)
                    if not batch:
                        break  # idle timeout
                    for msg in batch:
                        _print_message(msg, args.json)
                    printed += len(batch)
                    sys.stdout.flush()
                    if progress is not None:
                        progress.add(len(batch))
        finally:
            if progress is not None:
                progress.close()
        return EXIT_OK

    return run_with_client(args, body)


def _text(data: bytes) -> tuple[str, str]:
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def message_json(msg: Message) -> dict[str, Any]:
    """The ``--json`` form of a message."""
    value, value_encoding = _text(msg.value)
    key, key_encoding = (None, None) if msg.key is None else _text(msg.key)
    obj: dict[str, Any] = {
        "stream": msg.stream,
        "partition": msg.partition,
        "offset": msg.offset,
        "timestamp": msg.timestamp,
        "subject": msg.subject,
        "reply": msg.reply or None,
        "key": key,
        "key_encoding": key_encoding,
        "value": value,
        "value_encoding": value_encoding,
        "headers": [],
    }
    for name, hvalue in msg.headers:
        text, encoding = _text(hvalue)
        obj["headers"].append({"name": name, "value": text, "encoding": encoding})
    return obj


def _print_message(msg: Message, as_json: bool) -> None:
    if as_json:
        print_json(message_json(msg))
        return
    key = "-" if msg.key is None else msg.key.decode("utf-8", "replace")
    value = msg.value.decode("utf-8", "replace")
    sys.stdout.write(
        f"partition={msg.partition} offset={msg.offset} key={key} subject={msg.subject} "
        f"value={value}\n"
    )
