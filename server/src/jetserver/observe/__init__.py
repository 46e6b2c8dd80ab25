"""Tools that watch and measure a running cluster through the SDK: ``jet bench`` (the
benchmark engine and its report), ``jet top`` and ``jet console`` (a sampler of the
cluster's state, rates and consumer-group lag)."""
