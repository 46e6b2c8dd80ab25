"""NATS subject matching (pure), used to find the stream partition a subject lands on."""

from __future__ import annotations

__all__ = ["is_literal", "subject_matches"]


def is_literal(subject: str) -> bool:
    """True if ``subject`` has no wildcard token (``*`` or ``>``)."""
    return not any(token in ("*", ">") for token in subject.split("."))


def subject_matches(pattern: str, subject: str) -> bool:
    """True if the literal ``subject`` matches ``pattern`` under NATS wildcard rules.

    ``*`` matches exactly one token; ``>`` (last token only) matches one or more tokens.
    """
    pattern_tokens = pattern.split(".")
    subject_tokens = subject.split(".")
    for i, token in enumerate(pattern_tokens):
        if token == ">":
            return len(subject_tokens) > i
        if i >= len(subject_tokens):
            return False
        if token != "*" and token != subject_tokens[i]:
            return False
    return len(subject_tokens) == len(pattern_tokens)
