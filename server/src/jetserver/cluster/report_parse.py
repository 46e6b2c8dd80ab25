"""ReportLeader requests (api 9, spec/protocol.md): a silent-leader report's body and a
batch of them, validated before :class:`~jetserver.cluster.elections.Elections` counts
them. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jetserver.errors import invalid_argument

MAX_REPORTS = 1000
"""Most reports in one ReportLeader request (``reports``)."""


def parse_reports(request: Mapping[str, Any]) -> list[tuple[str, int, int, str]]:
    """Validate a ReportLeader request carrying ``reports`` (a list of report bodies).

    Raises:
        ApiError: INVALID_ARGUMENT (not a list, more than MAX_REPORTS, or a bad report).
    """
    reports = request.get("reports")
    if not isinstance(reports, list) or len(reports) > MAX_REPORTS:
        raise invalid_argument("reports", f"reports must be a list of at most {MAX_REPORTS}")
    parsed = []
    for r in reports:
        if not isinstance(r, dict):
            raise invalid_argument("reports", "each report must be an object")
        parsed.append(parse_report(r))
    return parsed


def parse_report(request: Mapping[str, Any]) -> tuple[str, int, int, str]:
    """Validate a ReportLeader request body: ``(stream, partition, leader_epoch, reporter)``.

    Raises:
        ApiError: INVALID_ARGUMENT naming the field.
    """
    values: list[Any] = []
    for name, typ in (
        ("stream", str),
        ("partition", int),
        ("leader_epoch", int),
        ("reporter", str),
    ):
        value = request.get(name)
        if isinstance(value, bool) or not isinstance(value, typ) or value in ("", None):
            raise invalid_argument(name, f"{name} must be a {typ.__name__}, got {value!r}")
        values.append(value)
    return values[0], values[1], values[2], values[3]
