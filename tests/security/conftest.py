"""Security tests: TLS (throwaway CA from ``certs.py``), authentication, authorization.

The server needs the asyncio backend (nats-py). Fixtures: ``ca`` (a CA with a server
certificate ``server`` for 127.0.0.1 and client certificates), ``other_ca`` (an unrelated CA).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from security.certs import CertAuthority


@pytest.fixture(scope="session")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertAuthority:
    """A CA for this test session."""
    return CertAuthority(Path(tmp_path_factory.mktemp("ca")))


@pytest.fixture(scope="session")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> CertAuthority:
    """A CA nobody trusts."""
    return CertAuthority(Path(tmp_path_factory.mktemp("other-ca")), name="other-ca")
