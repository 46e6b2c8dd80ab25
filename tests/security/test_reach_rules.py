"""Pure rules behind spec/security.md §2-§3: reserved internal streams, which streams a
subject reaches, and the subjects a Produce body carries."""

from __future__ import annotations

import pytest

from jetsdk.codec.messages import AckPolicy, ProduceMessage, ProduceRequest, encode_produce_request
from jetsdk.codec.produce_scan import produce_subjects
from jetserver.errors import ApiError
from jetserver.metadata.model import StreamMeta, StreamSpec
from jetserver.metadata.reserved import check_reserved, checked_spec
from jetserver.security.reach import StreamReach, listens_on, subjects_overlap


def _meta(name: str, subject: str, partitions: int = 1, internal: bool = False) -> StreamMeta:
    spec = StreamSpec(name=name, subject=subject, partitions=partitions, internal=internal)
    return StreamMeta(spec=spec, stream_id=name, created_ns=0, partitions=())


@pytest.mark.parametrize(
    ("subject", "partitions", "message", "expected"),
    [
        ("wide.>", 1, "wide.secret", True),
        ("wide.secret", 1, "wide.secret", True),
        ("orders", 4, "orders.3", True),
        ("orders", 4, "orders.4", False),  # no partition 4
        ("orders", 4, "orders.03", False),  # not a partition number
        ("orders", 4, "orders.0", False),  # partition 0 listens on the stream subject
        ("a.*", 3, "a.x.2", True),
        ("a.*", 3, "a.x.y", False),
    ],
)
def test_listens_on(subject: str, partitions: int, message: str, expected: bool) -> None:
    spec = StreamSpec(name="s", subject=subject, partitions=partitions)
    assert listens_on(spec, message) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("wide.>", "wide.secret", True),
        ("wide.>", "wide", False),
        ("a.*", "*.b", True),
        ("a.b", "a.c", False),
        (">", "_jet.groups", True),
        ("a.*.c", "a.b", False),
    ],
)
def test_subjects_overlap(a: str, b: str, expected: bool) -> None:
    assert subjects_overlap(a, b) is expected
    assert subjects_overlap(b, a) is expected


def test_reach_is_cached_per_metadata_and_skips_internal_streams() -> None:
    state = {
        "wide": _meta("wide", "wide.>"),
        "narrow": _meta("narrow", "wide.secret"),
        "__groups": _meta("__groups", "wide.secret", internal=True),
    }
    current = dict(state)
    reach = StreamReach(lambda: current)
    assert reach.reached("wide.secret") == ("narrow", "wide")
    assert reach.neighbours("wide", 0) == ("wide.>", "narrow")
    assert reach.neighbours("narrow", 0) == ("wide.secret", "wide")
    assert reach.neighbours("wide", 1) is None
    # A new metadata map (every change makes one) empties the caches.
    current = {"wide": state["wide"]}
    assert reach.reached("wide.secret") == ("wide",)
    assert reach.neighbours("wide", 0) == ("wide.>",)


def test_produce_subjects_reads_only_the_subjects() -> None:
    messages = (
        ProduceMessage(b"v" * 300, b"k", (("h", b"1"),), "a.b"),
        ProduceMessage(b"", None),
        ProduceMessage(b"w", b"", (), "a.b"),
    )
    body = encode_produce_request(ProduceRequest("s", 2, AckPolicy.ALL, 100, messages))
    assert produce_subjects(body) == ("s", 2, frozenset({"a.b", ""}))


def test_internal_streams_are_the_servers() -> None:
    body = {"name": "__groups", "subject": "_jet.groups", "internal": True}
    spec = checked_spec(body)
    assert (spec.partitions, spec.retention_max_age_s, spec.compact) == (16, 7 * 86_400.0, False)
    share = checked_spec({"name": "__share.w-1", "subject": "_jet.share.w-1", "internal": True})
    assert share.partitions == 1
    for bad, field in (
        ({**body, "subject": "secret"}, "subject"),
        ({**body, "partitions": 2}, "partitions"),
        ({**body, "compact": True}, "compact"),
        ({**body, "retention_max_age_s": 1}, "retention_max_age_s"),
        ({"name": "__offsets", "subject": "_jet.o", "internal": True}, "name"),
        ({"name": "__share.x", "subject": "_jet.share.y", "internal": True}, "subject"),
        ({"name": "spy", "subject": "_jet.>"}, "subject"),
    ):
        with pytest.raises(ApiError) as refused:
            checked_spec(bad)
        assert refused.value.details["field"] == field, bad
    assert check_reserved(StreamSpec(name="ok", subject="jet.groups")).subject == "jet.groups"
