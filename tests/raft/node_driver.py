"""One metadata Raft member as a process, driven by JSON lines (fault tests, benchmark).

Usage: ``python node_driver.py CONFIG.json`` with the cluster password in the environment
variable ``JET_RAFT_PASSWORD``. CONFIG.json: ``{"server_id", "address", "data_dir",
"peers": [[server_id, address], ...], "options": {RaftConfig timing fields}}``.

stdin, one JSON object per line, each with an ``id`` echoed in its answer:

- ``{"cmd": "status"}`` -> role, index, stream names and remembered op ids
- ``{"cmd": "propose", "name", "op_id", "timeout"}`` -> ``ok`` + index/created/duplicate
  and ``elapsed_s`` (propose call to applied, measured in the process), or ``ok: false``
  + ``error`` (the exception class name) and the leader if known
- ``{"cmd": "wait_applied", "index", "timeout"}`` -> ``ok``
- ``{"cmd": "quit"}`` (or end of stdin) -> clean stop

stdout, besides the answers: ``{"event": "ready"}`` once started, and
``{"event": "status", ...}`` at every change of role or leader.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from jetserver.logs import configure
from jetserver.metadata.model import StreamSpec
from jetserver.metadata.ops import CreateStream
from jetserver.raft import MetadataRaft, RaftConfig, RaftError, RaftPeer, RaftStatus

PASSWORD_ENV = "JET_RAFT_PASSWORD"
"""Environment variable holding the cluster password."""


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj) + b"\n")
    sys.stdout.buffer.flush()


def status_doc(status: RaftStatus) -> dict[str, Any]:
    return {
        "is_leader": status.is_leader,
        "leader_id": status.leader_id,
        "term": status.term,
    }


async def handle(raft: MetadataRaft, msg: dict[str, Any]) -> dict[str, Any]:
    cmd = msg.get("cmd")
    if cmd == "status":
        machine = raft.machine
        return {
            **status_doc(raft.status),
            "server_id": raft.config.server_id,
            "index": machine.index,
            "streams": sorted(machine.metadata.streams),
            "recent": [[op_id, seen.index] for op_id, seen in machine.recent.items()],
        }
    if cmd == "propose":
        name = str(msg["name"])
        op = CreateStream(StreamSpec(name=name, subject=f"subj.{name}"), name, 1, (("s1",),))
        started = time.perf_counter()
        try:
            applied = await raft.propose(op, op_id=msg["op_id"], timeout=float(msg["timeout"]))
        except RaftError as exc:
            return {"ok": False, "error": type(exc).__name__, "leader_id": raft.leader_id}
        return {
            "elapsed_s": time.perf_counter() - started,
            "ok": applied.result.ok,
            "index": applied.index,
            "created": applied.result.created,
            "duplicate": applied.duplicate,
        }
    if cmd == "wait_applied":
        try:
            await raft.wait_applied(int(msg["index"]), timeout=float(msg["timeout"]))
        except RaftError as exc:
            return {"ok": False, "error": type(exc).__name__}
        return {"ok": True}
    return {"ok": False, "error": f"unknown command {cmd!r}"}


async def main(config_path: Path) -> None:
    doc = orjson.loads(await anyio.Path(config_path).read_bytes())
    config = RaftConfig(
        server_id=doc["server_id"],
        address=doc["address"],
        peers=tuple(RaftPeer(i, a) for i, a in doc["peers"]),
        data_dir=Path(doc["data_dir"]),
        password=os.environ[PASSWORD_ENV],
        **doc.get("options", {}),
    )
    async with MetadataRaft(config) as raft, anyio.create_task_group() as tg:

        async def watch() -> None:
            async for status in raft.watch_status():
                emit({"event": "status", **status_doc(status)})

        async def answer(msg: dict[str, Any]) -> None:
            emit({"id": msg.get("id"), **(await handle(raft, msg))})

        tg.start_soon(watch)
        emit({"event": "ready"})
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.buffer.readline, abandon_on_cancel=True)
            if not line:
                break
            msg = orjson.loads(line)
            if msg.get("cmd") == "quit":
                break
            tg.start_soon(answer, msg)
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    configure(os.environ.get("JET_LOG_LEVEL", "INFO"))
    anyio.run(main, Path(sys.argv[1]))
