"""Cluster metadata: stream specs and assignments held by a pure, idempotent state machine.

``model`` holds the values, ``ops`` the operations and ``apply``, ``validate`` the request
checks, ``store`` the single-server persistence (metadata.json; issue 4 puts the same state
machine under Raft).
"""
