"""``jet passwd`` (hashes for the ``[auth]`` section) and ``jet acl list|set|clear`` (grants
in the replicated metadata; needs a cluster admin when auth is on).

    jet passwd --name alice           # reads the password (no echo), prints alice=scrypt$...
    jet passwd --token --name ci      # prints a new token and ci=sha256$...
    jet acl set alice publish:orders.* fetch:orders.*
    jet acl list
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from jetsdk import Client
from jetsdk.acl import PERMISSIONS, list_acls, set_acl
from jetserver.cli.exit_codes import EXIT_OK, EXIT_USAGE
from jetserver.cli.stream_cmd import (
    add_command_group,
    client_command,
    fail,
    print_json,
    run_with_client,
)
from jetserver.security.passwords import hash_password, hash_token, new_token


def _passwd(args: argparse.Namespace) -> int:
    prefix = f"{args.name}=" if args.name else ""
    if args.token:
        token = new_token()
        print(f"token: {token}")
        print(f"entry: {prefix}{hash_token(token)}")
        return EXIT_OK
    if args.stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            return fail("the passwords differ", EXIT_USAGE)
    if not password:
        return fail("empty password", EXIT_USAGE)
    print(f"{prefix}{hash_password(password)}")
    return EXIT_OK


def _grant(text: str) -> tuple[str, str]:
    permission, sep, pattern = text.partition(":")
    if not sep or permission not in PERMISSIONS or not pattern:
        raise argparse.ArgumentTypeError(
            f"a grant is PERMISSION:PATTERN with PERMISSION in {', '.join(PERMISSIONS)}"
        )
    return permission, pattern


def _acl_list(args: argparse.Namespace) -> int:
    async def body(client: Client) -> int:
        acls = await list_acls(client)
        print_json({i: [f"{p}:{pattern}" for p, pattern in g] for i, g in acls.items()})
        return EXIT_OK

    return run_with_client(args, body)


def _acl_set(args: argparse.Namespace) -> int:
    grants = [] if args.acl_command == "clear" else list(args.grants)

    async def body(client: Client) -> int:
        await set_acl(client, args.identity, grants)
        return EXIT_OK

    return run_with_client(args, body)


def register(subparsers: Any) -> None:
    """Add ``jet passwd`` and ``jet acl``."""
    passwd: argparse.ArgumentParser = subparsers.add_parser(
        "passwd",
        help="hash a password or make a token for the [auth] section",
        description="Print a password hash (scrypt) for [auth] users, or with --token a new "
        "random token and its hash for [auth] tokens.",
    )
    passwd.add_argument("--name", metavar="IDENTITY", help="print a whole IDENTITY=hash entry")
    passwd.add_argument("--token", action="store_true", help="make a token instead")
    passwd.add_argument("--stdin", action="store_true", help="read the password from stdin")
    passwd.set_defaults(func=_passwd)

    _, sub = add_command_group(
        subparsers,
        "acl",
        help="list or change access grants",
        description="Grants are stored in the replicated metadata; every server enforces "
        "them. Changing them needs admin on '*' when authentication is on.",
    )
    listing = sub.add_parser("list", help="every identity's grants (JSON)")
    client_command(listing, _acl_list)
    setting = sub.add_parser("set", help="replace an identity's grants")
    setting.add_argument("identity", metavar="IDENTITY")
    setting.add_argument(
        "grants", nargs="+", type=_grant, metavar="PERMISSION:PATTERN", help="e.g. fetch:orders.*"
    )
    client_command(setting, _acl_set)
    clear = sub.add_parser("clear", help="take every grant from an identity")
    clear.add_argument("identity", metavar="IDENTITY")
    client_command(clear, _acl_set)
