"""Names pages show for the stored words of the brain format (a memory's type and origin).

The stored values stay English (they are the format); only what a person reads is translated.
A value the format does not know comes back as stored.
"""

from __future__ import annotations

from connector.i18n import N_

# Translators: memory types (the brain format's words); keep them short, lower case where the language has case.
TYPE_LABELS = {
    "decision": N_("decision"),
    "insight": N_("insight"),
    "goal": N_("goal"),
    "experience": N_("experience"),
    "learning": N_("learning"),
    "relationship": N_("relationship"),
    "preference": N_("preference"),
    "observation": N_("observation"),
}

# Translators: where a memory came from (its origin): the person, an assistant's inference, a tool's output, an outside source.
ORIGIN_LABELS = {
    "user": N_("user"),
    "agent-inferred": N_("agent-inferred"),
    "tool-output": N_("tool-output"),
    "external": N_("external"),
}


def type_label(value: str) -> str:
    """The message naming memory type ``value`` (the value itself when unknown)."""
    return TYPE_LABELS.get(value, value)


def origin_label(value: str) -> str:
    """The message naming origin ``value`` (the value itself when unknown)."""
    return ORIGIN_LABELS.get(value, value)
