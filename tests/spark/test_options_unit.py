"""Option parsing: defaults, precedence and errors that name the option."""

from __future__ import annotations

import pytest

from jetsdk import AckPolicy
from jetspark._write import producer_id_for
from jetspark.errors import OptionError
from jetspark.options import (
    Security,
    SourceOptions,
    parse_offset_spec,
    security_args,
    security_options,
    sink_options,
    source_options,
)

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
        ({**SERVERS, "streams": "a", "maxBytesPerTrigger": "0"}, "maxBytesPerTrigger"),
        (
            {**SERVERS, "streams": "a", "maxRecordsPerTrigger": "5", "maxOffsetsPerTrigger": "5"},
            "maxOffsetsPerTrigger",
        ),
        (
            {**SERVERS, "streams": "a", "startingOffsetsByTimestamp": '{"b": {"0": 1}}'},
            "startingOffsetsByTimestamp",
        ),
        (
            {**SERVERS, "streams": "a", "startingOffsetsByTimestamp": '{"a": {"0": -1}}'},
            "startingOffsetsByTimestamp",
        ),
        (
            {**SERVERS, "streams": "a", "startingOffsetsByTimestamp": "latest"},
            "startingOffsetsByTimestamp",
        ),
        (
            {**SERVERS, "streams": "a", "startingOffsetsByTimestampStrategy": "earliest"},
            "startingOffsetsByTimestampStrategy",
        ),
        (
            {**SERVERS, "streams": "a", "endingOffsetsByTimestamp": '{"a": {"0": 1}}'},
            "endingOffsetsByTimestamp",
        ),
        ({**SERVERS, "streams": "a", "group": "a/b"}, "group"),
    ],
)
def test_bad_source_options(raw: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError, match=f"option '{option}'") as info:
        source_options(raw, streaming=True)
    assert info.value.option == option


def test_kafka_style_limits_and_times() -> None:
    opts = source_options(
        {
            **SERVERS,
            "streams": "a",
            "maxOffsetsPerTrigger": "7",
            "maxBytesPerTrigger": "1000",
            "startingOffsetsByTimestamp": '{"a": {"0": 5, "1": 6}}',
            "startingOffsetsByTimestampStrategy": "Latest",
        },
        streaming=True,
    )
    assert opts.max_records_per_trigger == 7
    assert opts.max_bytes_per_trigger == 1000
    assert opts.starting_by_timestamp == {"a": {0: 5, 1: 6}}
    assert opts.starting_timestamp_strategy == "latest"
    batch = source_options(
        {**SERVERS, "streams": "a", "endingOffsetsByTimestamp": '{"a": {"0": 9}}'},
        streaming=False,
    )
    assert batch.ending_by_timestamp == {"a": {0: 9}}
    assert batch.starting_timestamp_strategy == "error"


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


def test_security_defaults_to_plain_tcp_without_credentials() -> None:
    opts = sink_options(SERVERS)
    assert opts.security == Security()
    assert opts.security.client_kwargs() == {
        "tls": None,
        "tls_ca": None,
        "tls_cert": None,
        "tls_key": None,
        "server_hostname": None,
        "token": None,
        "user": None,
        "password": None,
    }


def test_security_options_any_case_on_source_and_sink() -> None:
    raw = {
        **SERVERS,
        "TLS": "True",
        "tlsca": "/ca.pem",
        "tlsCert": "/c.pem",
        "tlsKey": "/k.pem",
        "tlsServerHostname": "jet.example",
        "user": "alice",
        "password": "s3cret",
    }
    sec = source_options({**raw, "streams": "a"}, streaming=True).security
    assert sec == sink_options(raw).security
    assert sec.client_kwargs() == {
        "tls": True,
        "tls_ca": "/ca.pem",
        "tls_cert": "/c.pem",
        "tls_key": "/k.pem",
        "server_hostname": "jet.example",
        "token": None,
        "user": "alice",
        "password": "s3cret",
    }
    # A TLS file alone turns TLS on (as in the SDK); a token alone needs no TLS.
    assert sink_options({**SERVERS, "tlsCa": "/ca.pem"}).security.tls is True
    token = sink_options({**SERVERS, "token": "t0k"}).security
    assert (token.tls, token.token) == (False, "t0k")


@pytest.mark.parametrize(
    ("raw", "option"),
    [
        ({"tls": "yes"}, "tls"),
        ({"tls": "false", "tlsCa": "/ca.pem"}, "tls"),
        ({"tlsCa": " "}, "tlsCa"),
        ({"tlsCert": "/c.pem"}, "tlsKey"),
        ({"tlsKey": "/k.pem"}, "tlsCert"),
        ({"tlsServerHostname": "jet.example"}, "tlsServerHostname"),
        ({"token": "SECRET-TOKEN", "user": "alice", "password": "SECRET-PW"}, "token"),
        ({"user": "alice"}, "password"),
        ({"password": "SECRET-PW"}, "user"),
        ({"token": ""}, "token"),
        ({"tlsCaa": "/ca.pem"}, "tlsCaa"),
    ],
)
def test_bad_security_options_name_the_option_never_a_secret(
    raw: dict[str, str], option: str
) -> None:
    for parse in (
        lambda r: sink_options(r),
        lambda r: source_options({**r, "streams": "a"}, streaming=True),
    ):
        with pytest.raises(OptionError, match=f"option '{option}'") as info:
            parse({**SERVERS, **raw})
        assert info.value.option == option
        assert "SECRET" not in str(info.value)


def test_secrets_stay_out_of_repr() -> None:
    opts = sink_options({**SERVERS, "user": "alice", "password": "SECRET-PW"})
    assert "alice" in repr(opts)
    assert "SECRET" not in repr(opts)
    source = source_options({**SERVERS, "streams": "a", "token": "SECRET-TOKEN"}, streaming=True)
    assert "SECRET" not in repr(source)


def test_security_keyword_arguments_and_security_options() -> None:
    raw = security_args(tls=True, tls_ca="/ca.pem", server_hostname="h", token="t")
    assert raw == {"tls": "true", "tlsCa": "/ca.pem", "tlsServerHostname": "h", "token": "t"}
    sec = security_options({**raw, "stream": "ignored"})
    assert (sec.tls, sec.tls_ca, sec.server_hostname, sec.token) == (True, "/ca.pem", "h", "t")
    with pytest.raises(OptionError, match="option 'user'"):
        security_options(security_args(password="SECRET-PW"))


def test_table_read_options() -> None:
    opts = source_options({**SERVERS, "table": "prices", "includeHeaders": "true"}, streaming=False)
    assert (opts.table, opts.streams, opts.starting, opts.ending) == (
        True,
        ("prices",),
        "earliest",
        "latest",
    )
    assert opts.include_headers
    with pytest.raises(OptionError, match="only for batch reads") as info:
        source_options({**SERVERS, "table": "prices"}, streaming=True)
    assert info.value.option == "table"
    for option, value in (
        ("streams", "prices"),
        ("startingOffsets", "earliest"),
        ("endingOffsets", "latest"),
        ("subjects", "a.>"),
        ("minPartitions", "4"),
        ("maxBytesPerPartition", "1048576"),
    ):
        with pytest.raises(OptionError, match="does not apply to a table read") as info:
            source_options({**SERVERS, "table": "prices", option: value}, streaming=False)
        assert info.value.option == option
    with pytest.raises(OptionError, match="bad name"):
        source_options({**SERVERS, "table": "a b"}, streaming=False)
    with pytest.raises(OptionError, match="did you mean 'table'"):
        source_options({**SERVERS, "streams": "x", "tabel": "prices"}, streaming=False)


def test_table_sink_arguments() -> None:
    from jetspark.foreach_batch import foreach_batch_sink

    sink = foreach_batch_sink("127.0.0.1:9292", table="prices")
    assert (sink.opts.stream, sink.opts.table) == ("prices", True)
    assert not foreach_batch_sink("127.0.0.1:9292", "prices").opts.table
    with pytest.raises(OptionError, match="not both") as info:
        foreach_batch_sink("127.0.0.1:9292", "prices", table="prices")
    assert info.value.option == "table"
