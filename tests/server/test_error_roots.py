"""Every exception the server raises on purpose has the one root, JetServerError."""

from __future__ import annotations

from jetserver.errors import JetServerError
from support.exception_roots import outside

OUTSIDE_JET_SERVER_ERROR = {
    # Control flow: caught by the server's own callers and answered as an error frame or
    # a refusal (never raised out of a request).
    "jetserver.broker.key_index.IndexFull",
    "jetserver.broker.key_index.IndexBehind",
    "jetserver.broker.large_writes.RoleEnded",
    "jetserver.security.internal_records.Denied",
    "jetserver.console.http.HttpError",
    # The SDK's: a Timeout (a JetError) the replication session raises as the SDK would.
    "jetserver.replication.session_entry.LeftOut",
    # What the OS says: an OSError, as the file calls around it raise.
    "jetserver.storage.files.FileTooLarge",
    # The test kit's failed wait is an assertion (pytest reports it as a failure).
    "jetserver.testing.waiting.WaitTimeout",
}


def test_every_server_exception_has_the_one_root() -> None:
    assert outside("jetserver", JetServerError, OUTSIDE_JET_SERVER_ERROR) == []
