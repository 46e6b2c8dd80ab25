"""Exceptions of the consumer-group core (:mod:`jetsdk.group`).

One root, :class:`GroupError`; every error this package raises on purpose derives from it.
"""

from __future__ import annotations


class GroupError(Exception):
    """Root of every consumer-group error."""


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


class NotOwner(GroupError):
    """The member does not own the partition (yet, or any more) in its view.

    Attributes:
        stream: the stream name.
        partition: the partition number.
    """

    def __init__(self, stream: str, partition: int) -> None:
        super().__init__(f"this member does not own {stream}[{partition}]")
        self.stream = stream
        self.partition = partition


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
