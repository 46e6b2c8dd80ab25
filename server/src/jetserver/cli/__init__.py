"""The `jet` command line."""
