"""Spark Structured Streaming source and sinks for jet streams (issue 6: not yet built)."""
