"""Errors raised by brain writes."""

from __future__ import annotations


class BrainError(ValueError):
    """A write refused because of its input or the brain's state; nothing was changed.

    The message is safe to show to the user (it never contains memory content).
    """
