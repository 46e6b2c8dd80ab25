"""``jet stream create|list|info|delete``: manage streams through the client protocol.

Also holds what every client-side command shares (``--servers``, running a command with a
:class:`jetsdk.Client` and mapping errors to the exit codes of :mod:`jetserver.cli.main`):
``jet pub`` and ``jet sub`` (:mod:`jetserver.cli.pubsub_cmd`) use it too.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import orjson

from jetsdk import AckPolicy, Client, JetConnectionError, JetError, StreamExists
from jetsdk.client import DEFAULT_CONNECT_TIMEOUT, ENV_SERVERS
from jetsdk.client_dial import DEFAULT_SERVERS, configured_servers
from jetsdk.describe import merge_described
from jetsdk.errors import InvalidArgument
from jetsdk.metadata import StreamInfo
from jetserver.cli.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from jetserver.cli.security_opts import add_security_options, security_kwargs

_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}
_IUNITS = {"ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}
_DURATIONS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


# -- shared by the client-side commands ---------------------------------------------------

ACK_POLICIES = {"none": AckPolicy.NONE, "leader": AckPolicy.LEADER, "all": AckPolicy.ALL}
"""The values of ``--ack`` (``jet pub``, ``jet bench``)."""


def add_ack_option(parser: argparse.ArgumentParser) -> None:
    """``--ack none|leader|all`` (default leader)."""
    parser.add_argument(
        "--ack", choices=sorted(ACK_POLICIES), default="leader", help="ack policy (default leader)"
    )


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--servers`` and ``--connect-timeout``."""
    parser.add_argument(
        "--servers",
        metavar="HOST:PORT[,...]",
        help=f"servers to connect to (default: ${ENV_SERVERS}, then {','.join(DEFAULT_SERVERS)})",
    )
    parser.add_argument(
        "--connect-timeout",
        type=positive_float,
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="SECONDS",
        help=f"give up connecting after this long (default {DEFAULT_CONNECT_TIMEOUT:g})",
    )
    add_security_options(parser)


def client_command(
    parser: argparse.ArgumentParser,
    func: Callable[[argparse.Namespace], int],
    *,
    json_help: str | None = None,
) -> None:
    """Finish a command that talks to the servers: ``--json`` (with ``json_help``), the
    client options (:func:`add_client_options`), and ``func`` to run it."""
    if json_help is not None:
        parser.add_argument("--json", action="store_true", help=json_help)
    add_client_options(parser)
    parser.set_defaults(func=func)


def add_command_group(
    subparsers: Any, name: str, *, help: str, description: str, metavar: str = "SUBCOMMAND"
) -> tuple[argparse.ArgumentParser, Any]:
    """Add ``jet NAME``, a command that runs one of its subcommands (one is required; its
    name lands in ``args.NAME_command``). Returns the command's parser and the subparsers
    to add the subcommands to."""
    group: argparse.ArgumentParser = subparsers.add_parser(name, help=help, description=description)
    sub = group.add_subparsers(dest=f"{name}_command", metavar=metavar)
    sub.required = True
    return group, sub


def servers_shown(args: argparse.Namespace) -> str:
    """The servers a command talks to, for its screen: ``--servers``, else the list the
    client falls back to (:func:`jetsdk.client_dial.configured_servers`)."""
    return str(args.servers or configured_servers())


def client_factory(args: argparse.Namespace) -> Callable[[list[str] | None, float], Client]:
    """``(servers or None for the command's, connect timeout) -> an unentered Client`` with
    the command's security options (what ``jet top`` and ``jet console`` sample with)."""
    kwargs = security_kwargs(args)

    def factory(servers: list[str] | None, timeout: float) -> Client:
        return Client(servers or args.servers, connect_timeout=timeout, **kwargs)

    return factory


def run_with_client(args: argparse.Namespace, body: Callable[[Client], Awaitable[int]]) -> int:
    """Connect, run ``body(client)``, and turn errors into exit codes and stderr lines."""

    async def main() -> int:
        async with Client(
            args.servers, connect_timeout=args.connect_timeout, **security_kwargs(args)
        ) as client:
            return await body(client)

    try:
        return anyio.run(main)
    except InvalidArgument as exc:
        return fail(f"{exc}", EXIT_USAGE)
    except JetConnectionError as exc:
        return fail(f"cannot reach a server: {exc}", EXIT_UNREACHABLE)
    except JetError as exc:
        return fail(f"{type(exc).__name__}: {exc}", EXIT_FAILED)
    except BrokenPipeError:
        # The reader went away (e.g. `jet sub | head`); not an error.
        sys.stderr.close()
        return EXIT_OK


def fail(message: str, code: int) -> int:
    """Print ``jet: message`` on stderr and return ``code``."""
    print(f"jet: {message}", file=sys.stderr)
    return code


def print_json(obj: Any) -> None:
    """One JSON document on its own line (flushed)."""
    sys.stdout.write(orjson.dumps(obj).decode() + "\n")
    sys.stdout.flush()


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = nonnegative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def nonnegative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _number(text, int, "an integer", lambda v: v >= 0, "must not be negative")


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    return _number(text, float, "a number", lambda v: v > 0, "must be positive")


_N = TypeVar("_N", int, float)


def _number(
    text: str, parse: Callable[[str], _N], what: str, ok: Callable[[_N], bool], rule: str
) -> _N:
    """``text`` parsed by ``parse`` if that works ("not ``what``") and the value is ``ok``
    (else: ``rule``).

    Raises:
        argparse.ArgumentTypeError: either is not so.
    """
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{rule}: {text!r}")
    return value


def size(text: str) -> int:
    """argparse type: bytes, e.g. ``1048576``, ``500MB``, ``1GiB``."""
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]i?)?[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1048576, 500MB, 1GiB)")
    unit = (match.group(2) or "").lower()
    return int(match.group(1)) * (_IUNITS[unit] if unit.endswith("i") else _UNITS[unit])


def duration(text: str) -> float:
    """argparse type: seconds, e.g. ``3600``, ``90s``, ``30m``, ``12h``, ``7d``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 30m, 12h, 7d)")
    return float(match.group(1)) * _DURATIONS[match.group(2) or ""]


_NONE = "none"
"""The value that lifts a retention limit (``--retention-max-bytes none``), or gives the
message limit back to the server's (``--max-message-bytes none``)."""


def _or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_or_none(text: str) -> Any:
        return None if text.strip().lower() == _NONE else parse(text)

    parse_or_none.__name__ = getattr(parse, "__name__", "value")
    return parse_or_none


STREAM_SETTINGS: tuple[tuple[str, Callable[[str], Any], str, str], ...] = (
    ("retention_max_age", _or_none(duration), "DURATION", "e.g. 7d, 12h; none: no limit"),
    ("retention_max_bytes", _or_none(size), "SIZE", "per partition; none: no limit"),
    ("retention_max_messages", _or_none(positive_int), "N", "per partition; none: no limit"),
    ("segment_max_bytes", size, "SIZE", "roll segments at this size"),
    ("segment_max_age", duration, "DURATION", "roll segments at this age"),
    ("delete_retention", duration, "DURATION", "how long compaction keeps tombstones"),
    ("max_message_bytes", _or_none(size), "SIZE", "largest message; none: the server's limit"),
)
"""(setting, parser, metavar, help) of the stream settings that ``jet stream create`` sets
and ``jet stream edit`` changes, each an option ``--setting-name``."""


# -- jet stream ---------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``jet stream`` and its subcommands."""
    stream, sub = add_command_group(
        subparsers,
        "stream",
        help="create, list, inspect and delete streams",
        description="Manage streams (durable logs of NATS subjects).",
    )
    stream.set_defaults(stream_subcommands=sub)  # more in stream_edit_cmd

    create = sub.add_parser(
        "create",
        help="create a stream",
        description="Create a stream that stores the messages of SUBJECT. Partition 0 "
        "listens on SUBJECT, partition p > 0 on SUBJECT.p.",
    )
    create.add_argument("name", metavar="NAME", help="stream name ([A-Za-z0-9_.-], 1-255)")
    create.add_argument("--subject", help="NATS subject to store (default: NAME)")
    create.add_argument("--partitions", type=positive_int, default=1, metavar="N")
    create.add_argument(
        "--replicas", type=positive_int, default=1, metavar="R", help="replication factor"
    )
    create.add_argument("--compact", action="store_true", help="keep only the last per key")
    create.add_argument(
        "--group", metavar="G", help="load-balance group (one of its streams stores each message)"
    )
    for setting, parse, metavar, text in STREAM_SETTINGS:
        create.add_argument(
            "--" + setting.replace("_", "-"), dest=setting, type=parse, metavar=metavar, help=text
        )
    create.add_argument(
        "--duplicate-window",
        type=duration,
        metavar="DURATION",
        help="how long a plain message's Nats-Msg-Id is remembered (default 120s; 0: off)",
    )
    create.add_argument(
        "--no-nats-copies",
        action="store_true",
        help="do not republish what jet producers store to NATS: NATS subscribers and other "
        "streams on the subject do not see it (1 replica, no group; read through jet only)",
    )
    create.add_argument(
        "--fail-if-exists",
        action="store_true",
        help="fail if the stream exists at all (default: the same settings succeed, "
        "like the SDK's create_stream)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help=argparse.SUPPRESS
    )  # the default now; kept for scripts that pass it
    client_command(create, _create, json_help="print the stream as JSON")

    listing = sub.add_parser("list", help="list streams", description="List every stream.")
    listing.add_argument("--json", action="store_true", help="one JSON array of streams")
    listing.add_argument(
        "--all", action="store_true", help="include internal streams (__groups, __share.*)"
    )
    client_command(listing, _list)

    info = sub.add_parser(
        "info",
        help="show a stream and its partitions",
        description="Show a stream: settings and, per partition, leader, replicas, ISR, "
        "high watermark (hw), log end offset (leo) and log start.",
    )
    info.add_argument("name", metavar="NAME")
    client_command(info, _info, json_help="print JSON")

    delete = sub.add_parser(
        "delete", help="delete a stream and its data", description="Delete a stream and its data."
    )
    delete.add_argument("name", metavar="NAME")
    client_command(delete, _delete)


def _create(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        try:
            info = await client.create_stream(
                args.name,
                args.subject,
                partitions=args.partitions,
                replication_factor=args.replicas,
                compact=args.compact,
                group=args.group,
                **{setting: getattr(args, setting) for setting, *_ in STREAM_SETTINGS},
                duplicate_window=args.duplicate_window,
                no_nats_copies=args.no_nats_copies,
                exist_ok=False,
            )
            created = True
        except StreamExists as exc:
            if not exc.details.get("same_settings") or args.fail_if_exists:
                return fail(str(exc), EXIT_FAILED)
            info = await client.describe_stream(args.name)
            created = False
        if args.json:
            print_json({**info.to_json(), "created": created})
        else:
            print(
                f"stream {info.name} on {info.subject}: {info.partition_count} partition(s), "
                f"replication factor {info.replication_factor}"
                + ("" if created else " (exists with the same settings)")
            )
        return EXIT_OK

    return run_with_client(args, body)


def _list(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        streams = await client.list_streams(include_internal=args.all)
        if args.json:
            print_json([s.to_json() for s in streams])
            return EXIT_OK
        rows = [["NAME", "SUBJECT", "PARTITIONS", "REPLICAS", "COMPACT", "GROUP"]]
        for s in streams:
            rows.append(
                [
                    s.name,
                    s.subject,
                    str(s.partition_count),
                    str(s.replication_factor),
                    "yes" if s.compact else "no",
                    s.group or "-",
                ]
            )
        _print_table(rows)
        return EXIT_OK

    return run_with_client(args, body)


LEADER_VIEW_TIMEOUT_S = 2.0
"""Bound on asking a partition's leader for the positions the answering server lacks."""


async def _with_leader_positions(
    client: Client, info: StreamInfo, args: argparse.Namespace
) -> StreamInfo:
    """``info`` with HW, LEO, log start and size taken from each partition's leader where
    the answering server holds no replica (a partition of replication factor 1 elsewhere);
    offline partitions keep "-" (their leader does not answer)."""
    missing = {p.leader for p in info.partitions if p.hw is None and p.leader and not p.offline}
    if not missing:
        return info
    servers = (await client.metadata()).servers
    seen: dict[str, StreamInfo] = {}
    for sid in sorted(missing):
        server = servers.get(sid)
        if server is None:
            continue
        with anyio.move_on_after(LEADER_VIEW_TIMEOUT_S):
            try:
                async with Client(
                    [server.address],
                    connect_timeout=LEADER_VIEW_TIMEOUT_S,
                    request_timeout=LEADER_VIEW_TIMEOUT_S,
                    **security_kwargs(args),
                ) as direct:
                    seen[sid] = await direct.describe_stream(info.name)
            except (JetError, OSError):
                pass
    return merge_described(info, seen, missing_only=True)


def _info(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        info = await _with_leader_positions(client, await client.describe_stream(args.name), args)
        if args.json:
            print_json(info.to_json())
            return EXIT_OK
        _print_info(info)
        return EXIT_OK

    return run_with_client(args, body)


def _delete(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        await client.delete_stream(args.name)
        print(f"deleted stream {args.name}")
        return EXIT_OK

    return run_with_client(args, body)


def _print_info(info: StreamInfo) -> None:
    print(f"stream:      {info.name}")
    print(f"subject:     {info.subject}")
    print(f"group:       {info.group or '-'}")
    print(f"replicas:    {info.replication_factor}")
    print(f"compact:     {'yes' if info.compact else 'no'}")
    settings = {k: v for k, v in info.config.items() if v is not None}
    if settings:
        print("config:      " + ", ".join(f"{k}={v}" for k, v in sorted(settings.items())))
    rows = [
        ["PARTITION", "SUBJECT", "STATE", "LEADER", "REPLICAS", "ISR", "LOG_START", "HW", "LEO"]
    ]
    for p in info.partitions:
        rows.append(
            [
                str(p.partition),
                p.subject,
                p.state.upper() if p.is_offline else p.state,
                p.leader or "-",
                ",".join(p.replicas) or "-",
                ",".join(p.isr) or "-",
                _opt(p.log_start),
                _opt(p.hw),
                _opt(p.leo),
            ]
        )
    print()
    _print_table(rows)
    offline = sum(1 for p in info.partitions if p.is_offline)
    under = sum(1 for p in info.partitions if p.under_replicated)
    print(f"\n{len(info.partitions)} partition(s): {offline} offline, {under} under-replicated")
    for p in info.partitions:
        if p.offline is not None:
            print(f"OFFLINE partition {p.partition}: {p.offline}")


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
