"""Benchmarks (see __main__.py)."""
