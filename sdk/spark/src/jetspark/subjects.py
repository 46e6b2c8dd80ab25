"""NATS subject patterns for the source's ``subjects`` option: ``*`` matches one token,
``>`` (last) one or more; matched as the server matches them
(``jetserver.metadata.validate.subject_matches``)."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["pattern_problem", "patterns_regex"]


def pattern_problem(pattern: str) -> str | None:
    """What is wrong with ``pattern`` as a subject pattern, or None."""
    tokens = pattern.split(".")
    for i, token in enumerate(tokens):
        if not token or any(c.isspace() for c in token):
            return "empty token or space"
        if token == ">" and i != len(tokens) - 1:
            return "'>' must be last"
        if token not in ("*", ">") and ("*" in token or ">" in token):
            return "a wildcard must be a whole token"
    return None


def patterns_regex(patterns: Iterable[str]) -> str:
    """One regular expression matching a whole subject that any of ``patterns`` matches."""
    alternatives = []
    for pattern in patterns:
        tokens = []
        for token in pattern.split("."):
            if token == "*":
                tokens.append(r"[^.]+")
            elif token == ">":
                tokens.append(r".+")
            else:
                tokens.append(re.escape(token))
        alternatives.append(r"\.".join(tokens))
    return "^(?:" + "|".join(alternatives) + ")$"
