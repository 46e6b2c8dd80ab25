"""Metrics library: the cost of counting one request with jet's own ``RequestMetrics`` vs
``prometheus_client`` (issue 36: adopt the library only if the hot path costs the same or
less).

Per request the server counts (api, outcome) and observes the latency in a histogram
(``jetserver.metrics.exposition.RequestMetrics.observe``). The same with
prometheus_client is a labelled Counter and a labelled Histogram, each child looked up per
request (``labels()``) or, the best a port could do, looked up once and cached. Also one
scrape of the request families.

Run: ``pip install prometheus_client`` in a scratch place, then
``PYTHONPATH=<there> python -m bench.bench_metrics_lib`` (prometheus_client is not a
dependency of jet).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from jetsdk.codec.frames import FLAG_RESPONSE, Api, encode_frame
from jetserver.metrics.exposition import (
    LATENCY_BUCKETS_S,
    MetricsSources,
    RequestMetrics,
    api_name,
    render,
    reply_code,
)

N = 100_000
"""Requests counted per run."""
RUNS = 5
"""Runs per variant (the median is reported)."""
SCRAPES = 2000
"""Scrapes timed."""
REPLY = encode_frame(int(Api.PRODUCE), 7, b"\x00" * 40, flags=FLAG_RESPONSE)


def _jet() -> tuple[float, RequestMetrics]:
    metrics = RequestMetrics()
    started = time.perf_counter()
    for _ in range(N):
        metrics.observe(int(Api.PRODUCE), REPLY, 0.0003)
    return (time.perf_counter() - started) / N * 1e9, metrics


def _prom(counter: Any, hist: Any, *, cached: bool) -> float:
    children: dict[tuple[str, str], tuple[Any, Any]] = {}
    started = time.perf_counter()
    for _ in range(N):
        name = api_name(int(Api.PRODUCE))
        key = (name, reply_code(REPLY))
        if cached:
            pair = children.get(key)
            if pair is None:
                pair = children[key] = (counter.labels(*key), hist.labels(name))
            pair[0].inc()
            pair[1].observe(0.0003)
        else:
            counter.labels(*key).inc()
            hist.labels(name).observe(0.0003)
    return (time.perf_counter() - started) / N * 1e9


def main() -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    registry = CollectorRegistry()
    counter = Counter("jet_requests", "Requests.", ["api", "code"], registry=registry)
    hist = Histogram(
        "jet_request_duration_seconds",
        "Latency.",
        ["api"],
        buckets=LATENCY_BUCKETS_S,
        registry=registry,
    )
    jet, prom, cached = [], [], []
    metrics = RequestMetrics()
    for _ in range(RUNS):
        ns, metrics = _jet()
        jet.append(ns)
        prom.append(_prom(counter, hist, cached=False))
        cached.append(_prom(counter, hist, cached=True))
    print(
        f"per request (median of {RUNS} x {N:,}): jet RequestMetrics "
        f"{statistics.median(jet):.0f} ns; prometheus_client labels() per request "
        f"{statistics.median(prom):.0f} ns; children cached {statistics.median(cached):.0f} ns"
    )
    src = MetricsSources("s1", requests=metrics)
    started = time.perf_counter()
    for _ in range(SCRAPES):
        render(src)
    ours = (time.perf_counter() - started) / SCRAPES * 1e6
    started = time.perf_counter()
    for _ in range(SCRAPES):
        generate_latest(registry)
    theirs = (time.perf_counter() - started) / SCRAPES * 1e6
    print(
        f"one scrape of the request families: jet {ours:.0f} us; prometheus_client {theirs:.0f} us"
    )


if __name__ == "__main__":
    main()
