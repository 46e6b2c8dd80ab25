"""Spark integration tests (jetspark)."""
