"""The security gate in front of the request handlers: TLS at accept, authentication, ACLs.

:meth:`Security.setup` runs once per accepted socket (TLS handshake, bounded by
``limits.read_timeout_s``; a TLS-derived identity) and gives the connection its
:class:`~jetserver.protocol.gate_port.Session`. :meth:`Security.screen` runs before every request:

- Authenticate (API 10) is answered here; bad credentials get UNAUTHENTICATED and the
  connection is closed.
- With ``[auth] enabled``, any request but Hello and Authenticate on a connection that has
  not authenticated gets UNAUTHENTICATED and the connection is closed.
- Then the identity's grants (replicated metadata, :mod:`.acl`) decide: PERMISSION_DENIED
  (connection kept) or on to the handler. SetAcl / ListAcls (APIs 11, 12) are answered here.

With auth disabled (the default) nothing is checked: SetAcl still stores grants (so they can
be prepared before auth is switched on) and Authenticate answers the identity ``anonymous``.

Task safety: one event loop; a Session belongs to one connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import attrs

from jetsdk.codec.error_codes import ErrorCode
from jetsdk.codec.errors import CodecError
from jetsdk.codec.fetch_messages import decode_fetch_request
from jetsdk.codec.fetch_stream import decode_fetch_stream_request
from jetsdk.codec.frames import FLAG_RESPONSE, Api, Frame, encode_frame
from jetsdk.codec.messages import (
    ProduceHead,
    decode_json,
    decode_produce_head,
    decode_produce_request,
    encode_json,
)
from jetsdk.codec.produce_scan import produce_subjects
from jetsdk.metadata import INTERNAL_PREFIX
from jetserver.config.server import ServerConfig
from jetserver.errors import ApiError
from jetserver.logs import fields
from jetserver.metadata.model import Grant, StreamMeta
from jetserver.metadata.reserved import GROUPS_STREAM, share_group_of
from jetserver.metadata.validate import subject_matches
from jetserver.protocol import json_api
from jetserver.protocol.connection import Reply, error_reply
from jetserver.protocol.gate_port import Session
from jetserver.protocol.socket_io import SocketIO
from jetserver.security import acl
from jetserver.security.grants import ADMIN, FETCH, PUBLISH, grants_from_request
from jetserver.security.internal_records import (
    Denied,
    check_group_records,
    check_share_records,
)
from jetserver.security.passwords import INTERNAL_IDENTITY, parse_entry, verify_password
from jetserver.security.reach import StreamReach
from jetserver.security.throttle import LoginThrottle
from jetserver.security.tls_io import TlsSocketIO, server_context

log = logging.getLogger(__name__)

ANONYMOUS = "anonymous"
"""The identity Authenticate answers while auth is disabled."""
MAX_CREDENTIAL_CHARS = 4096
"""Longer tokens or passwords are refused before hashing."""

_INTERNAL_ONLY = frozenset({Api.OFFSET_FOR_LEADER_EPOCH, Api.REPORT_LEADER, Api.REPLICA_FETCH})
_GATE_APIS = frozenset({Api.AUTHENTICATE, Api.SET_ACL, Api.LIST_ACLS})
"""The APIs :meth:`Security.screen` answers itself with authentication off (HELLO then
goes to the handlers)."""

AclProposer = Callable[[dict[str, Any], str, tuple[Grant, ...]], Awaitable[None]]
"""Stores an identity's grants in the metadata (single-server store or through Raft), given
the SetAcl request (``op_id``, ``forwarded``, ``if_absent``) and its validated content."""


@attrs.define(eq=False)
class Security:
    """TLS, authentication and authorization of one server (see the module docstring);
    request dispatch sees it as its :class:`~jetserver.protocol.gate_port.RequestGate`."""

    config: ServerConfig
    """Server configuration (``[tls]``, ``[auth]``, limits)."""
    acls: Callable[[], Mapping[str, tuple[Grant, ...]]]
    """The current grants of every identity (replicated metadata)."""
    propose_acl: AclProposer
    """How SetAcl is applied."""
    streams: Callable[[], Mapping[str, StreamMeta]] = dict
    """The current streams (replicated metadata): a Produce is authorized against every
    stream its messages reach (spec/security.md §3)."""
    _context: ssl.SSLContext | None = None
    _users: dict[str, str] = attrs.field(factory=dict)
    _tokens: dict[str, str] = attrs.field(factory=dict)
    _internal_digest: bytes | None = None
    _throttle: LoginThrottle = attrs.field(factory=LoginThrottle)
    _reach: StreamReach = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._reach = StreamReach(self.streams)
        if self.config.tls.enabled:
            self._context = server_context(self.config.tls)
        auth = self.config.auth
        self._users = dict(parse_entry(e) for e in auth.users)
        self._tokens = {digest: identity for identity, digest in map(parse_entry, auth.tokens)}
        token = auth.resolved_internal_token()
        if token is not None:
            self._internal_digest = hashlib.sha256(token.encode()).digest()

    @property
    def auth_enabled(self) -> bool:
        """True if every connection must authenticate."""
        return self.config.auth.enabled

    # ------------------------------------------------------------------ accept

    async def setup(self, sock: socket.socket) -> tuple[SocketIO, Session]:
        """Wrap an accepted socket (TLS handshake if configured) and open its session.

        Raises:
            OSError / ssl.SSLError / TimeoutError: the handshake failed or took too long.
        """
        session = Session()
        with contextlib.suppress(OSError, IndexError):  # already gone: the first read says so
            session.peer = str(sock.getpeername()[0])
        if self._context is None:
            return SocketIO(sock), session
        io = TlsSocketIO(sock, self._context)
        try:
            with anyio.fail_after(self.config.limits.read_timeout_s):
                await io.start()
        except BaseException:
            io.close()
            raise
        cn = io.peer_common_name()
        session.tls_identity = cn
        if cn is not None and self.config.auth.tls_identity:
            session.identity = cn
        return io, session

    # ------------------------------------------------------------------ per request

    def screens(self, api: int) -> bool:
        """False if :meth:`screen` lets every request of ``api`` through unlooked at now
        (authentication off and not an API the gate answers itself): the caller need not
        call it (a coroutine per request on the Produce path)."""
        return self.config.auth.enabled or api in _GATE_APIS  # (no property call)

    def authorizes(self, session: Session) -> bool:
        """True if :meth:`screen` checks the grants of ``session``'s requests (a Produce's
        head is then decoded once, by the caller, for both: ``produce_head``)."""
        return self.auth_enabled and session.identity is not None and not session.internal

    async def screen(
        self, frame: Frame, session: Session, produce_head: ProduceHead | None = None
    ) -> Reply | None:
        """Answer or refuse ``frame`` here, or None to let the handlers answer it
        (``produce_head``: a Produce body's head if the caller decoded it already)."""
        api = frame.api
        try:
            if api == Api.AUTHENTICATE:
                return await self._authenticate(frame, session)
            if api == Api.HELLO:
                return self._hello(frame, session) if self.auth_enabled else None
            if self.auth_enabled:
                if session.identity is None:
                    return error_reply(
                        api,
                        frame.correlation_id,
                        ErrorCode.UNAUTHENTICATED,
                        "authenticate first (Authenticate, API 10)",
                        close=True,
                    )
                if not session.internal:
                    grants = self.acls().get(session.identity, ())
                    self._authorize(frame, grants, produce_head)
            if api == Api.SET_ACL:
                return await self._set_acl(frame)
            if api == Api.LIST_ACLS:
                return self._json_reply(frame, {"acls": self._acl_dict()})
            return None
        except Denied as exc:
            return error_reply(
                api,
                frame.correlation_id,
                ErrorCode.PERMISSION_DENIED,
                str(exc),
                {"identity": session.identity},
            )
        except ApiError as exc:
            return error_reply(api, frame.correlation_id, exc.code, exc.message, exc.details)
        except CodecError as exc:
            return error_reply(
                api,
                frame.correlation_id,
                ErrorCode.MALFORMED_FRAME,
                f"request body does not decode: {exc}",
                close=True,
            )

    def _json_reply(self, frame: Frame, obj: dict[str, Any]) -> Reply:
        body = encode_json(obj)
        return Reply(encode_frame(frame.api, frame.correlation_id, body, flags=FLAG_RESPONSE))

    def _hello(self, frame: Frame, session: Session) -> Reply:
        answer = json_api.hello(decode_json(frame.body), self.config)
        answer["auth_required"] = True
        if session.identity is not None:
            answer["identity"] = session.identity
        return self._json_reply(frame, answer)

    # ------------------------------------------------------------------ authentication

    async def _authenticate(self, frame: Frame, session: Session) -> Reply:
        req = decode_json(frame.body)
        if not self.auth_enabled:
            return self._json_reply(frame, {"identity": ANONYMOUS})
        identity = await self._identity_of(req, session)
        if identity is None:
            log.info(
                "authentication failed",
                extra=fields(
                    mechanism=str(req.get("mechanism"))[:20], user=_user_of(req), peer=session.peer
                ),
            )
            await anyio.sleep(self._throttle.failed(session.peer))
            return error_reply(
                frame.api,
                frame.correlation_id,
                ErrorCode.UNAUTHENTICATED,
                "bad credentials",
                close=True,
            )
        session.identity = identity
        return self._json_reply(frame, {"identity": identity})

    async def _identity_of(self, req: Mapping[str, Any], session: Session) -> str | None:
        mechanism = req.get("mechanism")
        if mechanism == "token":
            token = req.get("token")
            if not isinstance(token, str) or not 0 < len(token) <= MAX_CREDENTIAL_CHARS:
                return None
            digest = hashlib.sha256(token.encode()).digest()
            if self._internal_digest is not None and hmac.compare_digest(
                digest, self._internal_digest
            ):
                return INTERNAL_IDENTITY
            return self._tokens.get("sha256$" + digest.hex())
        if mechanism == "password":
            user, password = req.get("user"), req.get("password")
            if not isinstance(user, str) or not isinstance(password, str):
                return None
            stored = self._users.get(user)
            if stored is None or len(password) > MAX_CREDENTIAL_CHARS:
                return None
            ok = await anyio.to_thread.run_sync(verify_password, password, stored)
            return user if ok else None
        if mechanism == "tls" and self.config.auth.tls_identity:
            return session.tls_identity
        return None

    # ------------------------------------------------------------------ authorization

    def _authorize(
        self, frame: Frame, grants: tuple[Grant, ...], produce_head: ProduceHead | None = None
    ) -> None:
        api = frame.api
        if api in _INTERNAL_ONLY:
            raise Denied("server-to-server API")
        if api == Api.PRODUCE:
            self._authorize_produce(frame.body, grants, produce_head)
        elif api in (Api.FETCH, Api.FETCH_STREAM):
            if api == Api.FETCH:
                req = decode_fetch_request(frame.body)
                if req.replica_id >= 0:
                    raise Denied(
                        "Fetch with replica_id >= 0: followers replicate with ReplicaFetch"
                    )
                stream = req.stream
            else:
                stream = decode_fetch_stream_request(frame.body).stream
            _need(
                acl.allows(grants, FETCH, stream) or _group_reader(stream, grants),
                f"fetch on stream {stream!r}",
            )
        elif api in (Api.CREATE_STREAM, Api.DELETE_STREAM, Api.PURGE_STREAM, Api.UPDATE_STREAM):
            body = decode_json(frame.body)
            name = body.get("stream" if api == Api.PURGE_STREAM else "name")
            if isinstance(name, str):
                creating_groups = api == Api.CREATE_STREAM and _group_reader(name, grants)
                _need(
                    creating_groups or acl.allows(grants, ADMIN, name),
                    f"admin on stream {name!r}",
                )
        elif api in (Api.DESCRIBE_STREAM, Api.LIST_OFFSETS):
            body = decode_json(frame.body)
            name = body.get("name" if api == Api.DESCRIBE_STREAM else "stream")
            if isinstance(name, str):
                _need(
                    acl.allows_any(grants, name) or _group_reader(name, grants),
                    f"a permission on stream {name!r}",
                )
        elif api in (Api.SET_ACL, Api.LIST_ACLS, Api.REBALANCE_LEADERS):
            _need(acl.is_cluster_admin(grants), "admin on '*' (cluster admin)")

    def produce_refusal(
        self, session: Session, body: bytes | memoryview, head: ProduceHead
    ) -> str | None:
        """Why ``session`` may not send the Produce request ``body`` (a ProduceMany
        section, whose grants are checked one by one), or None if it may.

        Raises:
            CodecError: ``body`` does not decode.
        """
        if not self.authorizes(session):
            return None
        assert session.identity is not None
        try:
            self._authorize_produce(body, self.acls().get(session.identity, ()), head)
        except Denied as exc:
            return str(exc)
        return None

    def _authorize_produce(
        self,
        body: bytes | bytearray | memoryview,
        grants: tuple[Grant, ...],
        head: ProduceHead | None,
    ) -> None:
        """Produce: ``publish`` on the stream and on every other stream its messages reach
        through NATS; into an internal stream by a ``group`` grant, only that group's
        records (spec/security.md §3, §4)."""
        if head is None:
            head = decode_produce_head(body)
        stream, partition = head[:2]
        if acl.allows(grants, PUBLISH, stream):
            if not stream.startswith(INTERNAL_PREFIX):
                self._authorize_reach(body, stream, partition, grants)
            return  # an internal stream granted explicitly: no NATS copies reach others
        if stream == GROUPS_STREAM and acl.has_group_permission(grants):
            messages = decode_produce_request(body).messages
            check_group_records(grants, partition, self._reach.partitions(stream), messages)
            return
        share_group = share_group_of(stream)
        if share_group is not None and acl.allows_group(grants, share_group):
            check_share_records(share_group, decode_produce_request(body).messages)
            return
        _need(False, f"publish on stream {stream!r}")

    def _authorize_reach(
        self,
        body: bytes | bytearray | memoryview,
        stream: str,
        partition: int,
        grants: tuple[Grant, ...],
    ) -> None:
        neighbours = self._reach.neighbours(stream, partition)
        if neighbours is None:
            return  # no such partition: the handler answers
        if len(neighbours) == 1 or all(
            acl.allows(grants, PUBLISH, other) for other in neighbours[1:]
        ):
            return  # whatever the subjects, they reach only streams the identity may write
        psubj = neighbours[0]
        for subject in produce_subjects(body)[2]:
            if subject and not subject_matches(psubj, subject):
                continue  # refused by the handler as a whole: nothing is published
            for other in self._reach.reached(subject or psubj):
                if other != stream:
                    _need(
                        acl.allows(grants, PUBLISH, other),
                        f"publish on stream {other!r} (messages on subject "
                        f"{subject or psubj!r} are stored there too)",
                    )

    # ------------------------------------------------------------------ ACL management

    async def _set_acl(self, frame: Frame) -> Reply:
        req = decode_json(frame.body)
        try:
            identity, grants = grants_from_request(req)
        except ValueError as exc:
            raise ApiError(ErrorCode.INVALID_ARGUMENT, str(exc), {"field": "grants"}) from exc
        await self.propose_acl(req, identity, grants)
        log.info("acl set", extra=fields(identity=identity, grants=len(grants)))
        return self._json_reply(
            frame, {"identity": identity, "grants": [g.to_dict() for g in grants]}
        )

    def _acl_dict(self) -> dict[str, list[dict[str, Any]]]:
        current = self.acls()
        return {i: [g.to_dict() for g in current[i]] for i in sorted(current)}


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise Denied(f"permission denied: needs {what}")


def _group_reader(stream: str, grants: tuple[Grant, ...]) -> bool:
    """True if ``grants`` read (and may create) internal stream ``stream`` through a
    ``group`` grant: ``__groups`` with any, ``__share.<g>`` with one on ``g``."""
    if stream == GROUPS_STREAM:
        return acl.has_group_permission(grants)
    group = share_group_of(stream)
    return group is not None and acl.allows_group(grants, group)


def _user_of(req: Mapping[str, Any]) -> str:
    user = req.get("user")
    return user[:64] if isinstance(user, str) else ""
