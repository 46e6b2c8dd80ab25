"""``jet console``: serve the web console on ``--host``:``--port`` (default
127.0.0.1:8080) until Ctrl-C.

::

    jet console --servers 127.0.0.1:9292 --port 8080
    jet console --tls-ca ca.pem --user ops --allow-writes   # password in $JET_PASSWORD

Same ``--servers``, TLS and credential options as every client command. Read-only unless
``--allow-writes`` (create and delete streams, reset a group's offsets); with auth on, the
servers also require the console's credentials to hold the ``admin`` grant for those.
Prints ``console: http://HOST:PORT/`` once listening.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from jetsdk import Client
from jetserver.cli.exit_codes import EXIT_OK
from jetserver.cli.stream_cmd import client_command, client_factory, run_with_client, servers_shown

DEFAULT_PORT = 8080


def register(subparsers: Any) -> None:
    """Add ``jet console``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "console",
        help="serve a web console of the cluster",
        description="Serve a web console (cluster, streams, records, consumer groups, live "
        "plots) until Ctrl-C. Read-only unless --allow-writes.",
    )
    p.add_argument("--host", default="127.0.0.1", help="listen host (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"listen port (default {DEFAULT_PORT}; 0: any)",
    )
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="allow creating and deleting streams and resetting group offsets",
    )
    client_command(p, _console)


def _console(args: argparse.Namespace) -> int:
    from jetserver.console.app import ConsoleApp
    from jetserver.console.http import serve
    from jetserver.observe.sampler import ClusterSampler

    shown = servers_shown(args)
    factory = client_factory(args)

    async def body(client: Client) -> int:
        listener = await anyio.create_tcp_listener(local_host=args.host, local_port=args.port)
        async with listener, ClusterSampler(client, factory) as sampler:
            app = ConsoleApp(client, sampler, allow_writes=args.allow_writes, servers=shown)
            bound = listener.extra(anyio.abc.SocketAttribute.local_address)
            host, port = (bound[0], bound[1]) if isinstance(bound, tuple) else (bound, 0)
            print(f"console: http://{host}:{port}/", flush=True)
            async with anyio.create_task_group() as tg:
                tg.start_soon(app.run_sampler)
                tg.start_soon(app.tables.run)
                await serve(listener, app.handle)
        return EXIT_OK

    return run_with_client(args, body)
