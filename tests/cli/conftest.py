"""CLI tests run `jet` as a subprocess against the module's `jet dev`."""
