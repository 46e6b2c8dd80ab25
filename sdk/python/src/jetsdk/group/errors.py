"""Exceptions of consumer groups (:mod:`jetsdk.group` and the group consumer).

One root, :class:`GroupError`, itself a :class:`~jetsdk.errors.JetError` (so ``except
JetError`` catches everything the SDK raises); every error this package raises on purpose
derives from it. None of them is retriable as such: each says what to do instead.
"""

from __future__ import annotations

from typing import Any

from jetsdk.errors import JetError


class GroupError(JetError):
    """Root of every consumer-group error."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses have their own constructors: pickle the plain Exception way.
        return (_rebuild_group_error, (type(self), self.message, self.__dict__))

    @property
    def retriable(self) -> bool:
        """Always False: group errors are decisions, not transient failures."""
        return False


def _rebuild_group_error(cls: type[GroupError], message: str, state: dict[str, Any]) -> GroupError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class PartitionGroupError(GroupError):
    """A group error about one partition.

    Attributes:
        stream: the stream name.
        partition: the partition number.
    """

    def __init__(self, message: str, stream: str, partition: int) -> None:
        super().__init__(message)
        self.stream = stream
        self.partition = partition


class InvalidGroupRecord(GroupError, ValueError):
    """Bytes or fields that are not a valid group-log record (spec/groups.md, "Records").

    Readers skip such records: every reader skips the same ones, so views stay equal.

    Attributes:
        reason: a short tag (``"json"``, ``"field"``, ``"type"``, ``"limit"``).
    """

    def __init__(self, message: str, *, reason: str = "field") -> None:
        super().__init__(message)
        self.reason = reason


class UnsupportedGroupVersion(InvalidGroupRecord):
    """A record written by a newer protocol version than this reader knows.

    Unlike other invalid records it must not be skipped (a newer reader would apply it and the
    views would differ): a member that meets one stops taking part in the group.

    Attributes:
        version: the record's version number.
    """

    def __init__(self, version: int) -> None:
        super().__init__(f"group record version {version} is not supported", reason="version")
        self.version = version


class InvalidGroupConfig(GroupError, ValueError):
    """A configuration value out of its documented range."""


class NotOwner(PartitionGroupError):
    """The member does not own the partition (yet, or any more) in its view."""

    def __init__(self, stream: str, partition: int) -> None:
        super().__init__(f"this member does not own {stream}[{partition}]", stream, partition)


class UnknownAssignor(GroupError):
    """The group chose an assignor this reader does not have (a custom one).

    Attributes:
        name: the assignor's name.
    """

    def __init__(self, name: str) -> None:
        super().__init__(f"assignor {name!r} is not registered in this reader")
        self.name = name


class MemberFenced(GroupError):
    """Another incarnation with the same instance id replaced this member.

    The core reports it as a :class:`~jetsdk.group.member.Fenced` action; the consumer raises
    this to its user once it has handed back what it owned.
    """


class CommitFailed(PartitionGroupError):
    """The group log refused an offset commit (spec/groups.md, "Commits").

    Attributes:
        offset: the offset that was not committed.
        reason: ``not_owner`` (the partition moved to another member), ``stale_generation``
            (this member's ownership ended and began again), ``regression`` (below the
            committed offset) or ``timeout`` (no answer from the group log in time; the
            commit may still apply).
    """

    def __init__(self, stream: str, partition: int, offset: int, reason: str) -> None:
        message = f"commit of {stream}[{partition}] at offset {offset} failed: {reason}"
        super().__init__(message, stream, partition)
        self.offset = offset
        self.reason = reason


class NoCommittedOffset(PartitionGroupError):
    """The group has no committed offset for a partition and the reset policy is ``raise``."""

    def __init__(self, stream: str, partition: int) -> None:
        message = f"the group has no committed offset for {stream}[{partition}]"
        super().__init__(message, stream, partition)
