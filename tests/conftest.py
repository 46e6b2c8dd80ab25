"""Shared fixtures: see tests/support/ for the nats-server and server helpers."""
