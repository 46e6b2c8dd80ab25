"""What the messages a PySyncObj member receives pass through before PySyncObj handles them.

:func:`install` replaces the transport's message callback of a ``SyncObj`` with a filter
that drops keepalives (:data:`KEEPALIVE_TYPE`), keeps a leader's next index for a
follower from moving back on a late acknowledgement (:func:`_keep_next_index`), and gives
a follower Raft's AppendEntries rule (:func:`_append_entries`). It runs in the Raft thread,
as PySyncObj's handler does, and reads PySyncObj's private state (name-mangled
``_SyncObj__*`` attributes).

Written against PySyncObj 0.3.17: :data:`PATCHED_METHOD_SHA256` is the digest of the
handler it corrects (a test fails if an upgrade changes it, to be reviewed again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KEEPALIVE_TYPE = "jet_keepalive"
"""A message every member sends every other member (``host._send_keepalives``); dropped
on receipt before PySyncObj sees it."""
PYSYNCOBJ_METHOD = "_SyncObj__onMessageReceived"
"""PySyncObj's message handler, which this module's filter wraps."""
PATCHED_METHOD_SHA256 = "ddfe34b6c02821795146dc533fb7c0fcf6574a082a68a227b4c885c9e14be206"
"""SHA-256 of :data:`PYSYNCOBJ_METHOD`'s source in PySyncObj 0.3.17."""

Deliver = Callable[[Any, Any], None]


def install(obj: Any) -> None:
    """Put the filter between ``obj``'s transport and its message handler."""
    deliver: Deliver = getattr(obj, PYSYNCOBJ_METHOD)

    def filtered(node: Any, message: Any) -> None:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == KEEPALIVE_TYPE:
            return  # it refreshed the connection's last read: all it is for
        if kind == "next_node_idx":
            _keep_next_index(obj, deliver, node, message)
        elif kind == "append_entries":
            _append_entries(obj, deliver, node, message)
        else:
            deliver(node, message)

    obj._SyncObj__transport.setOnMessageReceivedCallback(filtered)


def _keep_next_index(obj: Any, deliver: Deliver, node: Any, message: dict[str, Any]) -> None:
    """Stop a late acknowledgement from moving the leader's next index for a follower back.

    PySyncObj advances ``nextIndex[follower]`` optimistically when it sends entries, then
    sets it to whatever a successful ``next_node_idx`` answer says. The answer to a
    heartbeat sent before the last entries arrives after them and moves ``nextIndex``
    back, so the leader sends those entries again (which a follower then skips, see
    :func:`_append_entries`). Keeping ``nextIndex`` where it was on a successful, non-reset
    answer removes these resends; ``matchIndex`` (which decides commits) is PySyncObj's
    own, and a follower that really misses entries answers with a reset, handled as before.
    """
    if not message.get("success") or message.get("reset"):
        deliver(node, message)
        return
    next_index = obj._SyncObj__raftNextIndex
    before = next_index.get(node)
    deliver(node, message)
    after = next_index.get(node)
    if before is not None and after is not None and after < before:
        next_index[node] = before


def _append_entries(obj: Any, deliver: Deliver, node: Any, message: dict[str, Any]) -> None:
    """Raft's AppendEntries receiver rule (§5.3, Figure 2, steps 3-5) on a follower.

    PySyncObj 0.3.17, once the entry at ``prevLogIdx`` matches, deletes every entry after
    it and appends the message's entries. Raft deletes an existing entry only if it
    conflicts with a new one (same index, different term), with all that follow it. With
    PySyncObj's rule a duplicated or reordered shorter message, or a new leader's first
    heartbeat, deleted entries the follower had acknowledged: a committed entry could be
    left on less than a majority (then lost if the leader died), and applied entries were
    truncated (its CRITICAL "truncating already-applied log entries").

    Here, when the entry at ``prevLogIdx`` matches:

    - the leading entries the follower holds with the same term are skipped (Log
      Matching: same index and term, same entry and same entries before it);
    - if some remain (from the first conflict, or past the end of the log), PySyncObj gets
      the message with ``prevLogIdx`` moved to the last skipped entry: it deletes from the
      conflict on (undoing cluster changes of what it deletes), appends the rest (the
      journal truncates and appends durably) and answers ``prevLogIdx + len(entries) + 1``;
    - if none remain and the log goes on past them, PySyncObj gets the message without
      ``prevLogIdx`` (it then updates only the term, the leader, the election deadline and
      the commit index) and the answer is sent here.

    The answer's next index is ``prevLogIdx + len(entries) + 1`` in both cases: the
    follower claims no more than the message verified (the leader takes it as its
    ``matchIndex`` for the follower). The commit index follows the leader's up to
    ``prevLogIdx + len(entries)`` only (Figure 2's min(leaderCommit, index of last new
    entry)): entries past it may be of an older term, not yet overwritten.

    Anything else goes to PySyncObj unchanged: a mismatch at ``prevLogIdx`` (it answers
    with a reset), a message of an older term (ignored), a snapshot, a chunked entry
    (``transmission``: never sent, see ``host.APPEND_BATCH_BYTES``).
    """
    if (
        message.get("term", -1) < obj.raftCurrentTerm
        or "prevLogIdx" not in message
        or "transmission" in message
    ):
        deliver(node, message)
        return
    log = obj._SyncObj__raftLog
    entries = message.get("entries") or []
    prev_index = message["prevLogIdx"]
    position = prev_index - log[0][1]
    if position < 0 or position >= len(log) or log[position][2] != message["prevLogTerm"]:
        deliver(node, message)
        return
    held = 0
    for entry in entries:
        position += 1
        if position >= len(log) or log[position][2] != entry[2]:
            break
        held += 1
    verified = prev_index + len(entries)
    if held < len(entries) or log[-1][1] == verified:
        if held:
            message = message | {
                "prevLogIdx": entries[held - 1][1],
                "prevLogTerm": entries[held - 1][2],
                "entries": entries[held:],
            }
        deliver(node, message)
        return
    leader_commit = message["commit_index"]
    bare = {k: v for k, v in message.items() if k not in ("prevLogIdx", "prevLogTerm", "entries")}
    deliver(node, bare | {"commit_index": min(leader_commit, verified)})
    obj._SyncObj__leaderCommitIndex = leader_commit  # the leader's, for isReady
    obj._SyncObj__sendNextNodeIdx(node, nextNodeIdx=verified + 1, success=True)
