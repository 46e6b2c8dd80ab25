"""Option parsing: defaults, precedence and errors that name the option."""

from __future__ import annotations

import pytest

from jetsdk import AckPolicy
from jetspark._write import producer_id_for
from jetspark.errors import OptionError
from jetspark.options import SourceOptions, parse_offset_spec, sink_options, source_options

SERVERS = {"servers": "127.0.0.1:9292"}


def test_source_defaults() -> None:
    streaming = source_options({**SERVERS, "streams": "a, b"}, streaming=True)
    assert streaming == SourceOptions(servers=("127.0.0.1:9292",), streams=("a", "b"))
    batch = source_options({**SERVERS, "streams": "a"}, streaming=False)
    assert batch.starting == "earliest"
    assert batch.ending == "latest"


def test_options_ignore_case_and_spark_options() -> None:
    opts = source_options(
        {**SERVERS, "STREAMS": "a", "startingoffsets": '{"a": {"0": -2}}', "path": "x"},
        streaming=True,
    )
    assert opts.starting == {"a": {0: -2}}


def test_pattern_matches_whole_names_and_never_internal_streams() -> None:
    opts = source_options({**SERVERS, "streamsPattern": "or.*"}, streaming=True)
    assert opts.matches("orders")
    assert not opts.matches("xorders")
    assert not source_options({**SERVERS, "streamsPattern": ".*"}, streaming=True).matches(
        "__offsets"
    )


@pytest.mark.parametrize(
    ("raw", "option"),
    [
        ({"streams": "a"}, "servers"),
        ({**SERVERS, "servers": "nohost"}, "servers"),
        ({**SERVERS}, "streams"),
        ({**SERVERS, "streams": "a,a"}, "streams"),
        ({**SERVERS, "streams": "bad name"}, "streams"),
        ({**SERVERS, "streamsPattern": "("}, "streamsPattern"),
        ({**SERVERS, "streams": "a", "startingOffsets": '{"b": {"0": 1}}'}, "startingOffsets"),
        ({**SERVERS, "streams": "a", "startingOffsets": '{"a": {"x": 1}}'}, "startingOffsets"),
        ({**SERVERS, "streams": "a", "endingOffsets": "latest"}, "endingOffsets"),
        ({**SERVERS, "streams": "a", "maxRecordsPerTrigger": "-5"}, "maxRecordsPerTrigger"),
        ({**SERVERS, "streams": "a", "maxRecordsPerTriger": "5"}, "maxRecordsPerTriger"),
        ({**SERVERS, "streams": "a", "includeHeaders": "yes"}, "includeHeaders"),
        ({**SERVERS, "streams": "a", "startingTimestamp": "soon"}, "startingTimestamp"),
        ({**SERVERS, "streams": "a", "requestTimeout": "0"}, "requestTimeout"),
        ({**SERVERS, "streams": "a", "group": "a/b"}, "group"),
    ],
)
def test_bad_source_options(raw: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError, match=f"option '{option}'") as info:
        source_options(raw, streaming=True)
    assert info.value.option == option


def test_ending_offsets_for_batch_only_and_never_earliest() -> None:
    with pytest.raises(OptionError, match="endingOffsets"):
        source_options({**SERVERS, "streams": "a", "endingOffsets": "earliest"}, streaming=False)
    with pytest.raises(OptionError, match="endingOffsets"):
        source_options(
            {**SERVERS, "streams": "a", "endingOffsets": '{"a": {"0": -2}}'}, streaming=False
        )


def test_offset_spec_words_and_json() -> None:
    assert parse_offset_spec("o", " Earliest ") == "earliest"
    assert parse_offset_spec("o", '{"s": {"3": 7, "0": -1}}') == {"s": {3: 7, 0: -1}}
    with pytest.raises(OptionError, match="'o'"):
        parse_offset_spec("o", '{"s": {"01": 7}}')


def test_sink_options() -> None:
    opts = sink_options({**SERVERS, "stream": "out", "ack": "Leader", "checkpointLocation": "x"})
    assert opts.ack == AckPolicy.LEADER
    assert opts.stream == "out"
    with pytest.raises(OptionError, match="'ack'"):
        sink_options({**SERVERS, "ack": "maybe"})
    with pytest.raises(OptionError, match="'sinkName'"):
        sink_options({**SERVERS, "sinkName": " "})


def test_producer_ids_are_stable_63_bit_and_distinct() -> None:
    a = producer_id_for("foreachBatch", "query-1", 7, 0)
    assert a == producer_id_for("foreachBatch", "query-1", 7, 0)
    assert 0 < a < 2**63
    assert len({producer_id_for("q", b, t) for b in range(50) for t in range(8)}) == 400
