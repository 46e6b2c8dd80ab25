"""The common Produce request served in one step (broker/produce_one.py) answers as the
general path does.

The same requests go to two identical streams, one served as always (the one-step path
where it applies) and one with the one-step path switched off; every answer (error code,
offset; error frames), every stored record and every NATS copy must be the same.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from jetsdk.codec.error_codes import AckPolicy
from jetsdk.codec.messages import ProduceMessage, ProduceResult
from jetsdk.envelope import parse_message
from jetserver.broker.produce_one import OneProduce
from jetserver.server import Server
from jetserver.testing import nats_flushed
from support.one_step import OneStepSwitch
from support.raw_client import RawClient, ServerError

pytestmark = pytest.mark.anyio

Case = tuple[int, list[ProduceMessage], dict[str, Any]]


def _cases() -> list[Case]:
    """(partition, messages, produce options): the common case and its neighbours."""
    plain = [ProduceMessage(b"v%d" % i) for i in range(3)]
    return [
        (0, plain[:1], {}),
        (0, [ProduceMessage(b"k-and-v", key=b"k")], {}),
        (0, [ProduceMessage(b"subject", subject="{s}.x")], {}),
        (0, [ProduceMessage(b"other subject", subject="{s}.y")], {}),
        (0, [ProduceMessage(b"bad subject", subject="{s}.*")], {}),
        (0, [ProduceMessage(b"bad subject", subject="{s}..x")], {}),
        (0, [ProduceMessage(b"x" * 300)], {}),  # over max_message_bytes
        (0, [ProduceMessage(b"headers", headers=(("h", b"1"),))], {}),
        (0, [ProduceMessage(b"msg id", headers=(("Nats-Msg-Id", b"m1"),))], {}),
        (0, [ProduceMessage(b"msg id again", headers=(("Nats-Msg-Id", b"m1"),))], {}),
        (0, [ProduceMessage(b"idempotent")], {"producer_id": 5, "base_seq": 0}),
        (0, [ProduceMessage(b"idempotent retry")], {"producer_id": 5, "base_seq": 0}),
        (0, plain[1:2], {"ack_policy": AckPolicy.NONE}),
        (0, plain[2:3], {"ack_policy": AckPolicy.ALL}),
        (0, plain, {}),  # three messages
        (1, plain[:1], {}),  # no such partition
        (0, [ProduceMessage(b"")], {}),
        (0, [ProduceMessage(b"last")], {"timeout_ms": 1000}),
    ]


def _answer(results: list[ProduceResult] | ServerError, stream: str) -> object:
    if isinstance(results, ServerError):
        return ("error", results.code, results.error.message.replace(stream, "s"))
    return [(r.error_code, r.offset) for r in results]


async def _run(c: RawClient, stream: str) -> list[object]:
    answers: list[object] = []
    for partition, messages, options in _cases():
        named = [
            ProduceMessage(
                m.value,
                key=m.key,
                subject=m.subject.format(s=stream) if m.subject else m.subject,
                headers=m.headers,
            )
            for m in messages
        ]
        try:
            answers.append(_answer(await c.produce(stream, partition, named, **options), stream))
        except ServerError as exc:
            answers.append(_answer(exc, stream))
    return answers


class _AtOnceSwitch:
    """Switches ``OneProduce.serve_now`` (the request answered in the reader callback, no
    task) between counting and never taken."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self._real = OneProduce.serve_now
        self.taken = 0

    def set(self, on: bool) -> None:
        real = self._real

        def counting(obj: OneProduce, *args: Any) -> Any:
            out = real(obj, *args)
            self.taken += out is not None
            return out

        def never(obj: OneProduce, *args: Any) -> None:
            return None

        self._monkeypatch.setattr(OneProduce, "serve_now", counting if on else never)


@pytest.mark.parametrize("durability", ["flushed", "written"])
@pytest.mark.parametrize("at_once", [True, False], ids=["at_once", "in_task"])
async def test_the_one_step_path_answers_stores_and_copies_as_the_general_path(
    jet: Server,
    nc: NatsClient,
    durability: str,
    at_once: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    copies: dict[str, list[Msg]] = {"one": [], "gen": []}

    async def on_msg(msg: Msg) -> None:
        copies[msg.subject.split(".")[0]].append(msg)

    await nc.subscribe("one.x", cb=on_msg)
    await nc.subscribe("gen.x", cb=on_msg)
    await nats_flushed(nc)
    step = OneStepSwitch(monkeypatch, OneProduce, "serve")
    now = _AtOnceSwitch(monkeypatch)
    async with await RawClient.connect(jet.address) as c:
        for name in ("one", "gen"):
            await c.create_stream(
                name=name, subject=f"{name}.x", durability=durability, max_message_bytes=200
            )
        step.on()
        now.set(at_once)
        one = await _run(c, "one")
        step.off()
        now.set(False)
        gen = await _run(c, "gen")
        assert (now.taken if at_once else step.taken) >= 5  # the path under test was taken
        # At once: the plain ones, with a key, a subject, headers (no controls), ack NONE,
        # ack ALL (answered by its commit), an empty value, a timeout (8); none left to
        # the one-step path in a task.
        assert not at_once or (now.taken, step.taken) == (8, 0)
        assert one == gen
        leo = jet.streams.replica("one", 0).log.log_end_offset
        assert leo == jet.streams.replica("gen", 0).log.log_end_offset
        stored = {name: await c.collect(name, 0, leo) for name in ("one", "gen")}
        with anyio.fail_after(10):
            while len(copies["one"]) < leo or len(copies["gen"]) < leo:  # noqa: ASYNC110
                await anyio.sleep(0.01)
    one_records, gen_records = stored["one"], stored["gen"]
    assert [(r.offset, r.key, r.value, r.headers) for r in one_records] == [
        (r.offset, r.key, r.value, r.headers) for r in gen_records
    ]
    assert [r.subject.removeprefix("one") for r in one_records] == [
        r.subject.removeprefix("gen") for r in gen_records
    ]

    def seen(msg: Msg, stream: str) -> tuple[object, ...]:
        env = parse_message(msg.data)
        assert env is not None
        return (
            msg.subject.removeprefix(stream),
            (msg.headers or {}).get("Jet-Stored", "").removeprefix(stream),
            env.key,
            env.value,
            env.headers,
            env.ack_policy,
            env.correlation_id,
            env.producer_id,
            bool(env.ack_inbox),
        )

    assert [seen(m, "one") for m in copies["one"]] == [seen(m, "gen") for m in copies["gen"]]
