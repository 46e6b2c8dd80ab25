"""Security: TLS, authentication and authorization (spec/protocol.md, "Security").

Modules: :mod:`.config` (the ``[tls]`` and ``[auth]`` sections), :mod:`.passwords`
(hashes), :mod:`.acl` (permission rules, pure), :mod:`.tls_io` (TLS sockets),
:mod:`.gate` (the per-connection gate), :mod:`.peer` (server-to-server connections).
"""
