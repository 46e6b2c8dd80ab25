"""Test kit: real nats-server processes, the `jet dev` cluster, a raw protocol client."""
