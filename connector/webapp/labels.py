"""Names pages show for the stored words of the brain format (a memory's type and origin, why
a write is held for verification).

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


# Translators: why a memory waits for the person's verification (the brain records a code per reason).
REASON_LABELS = {
    "origin:external": N_("it comes from an outside source"),
    "origin:tool-output": N_("it comes from a tool's output"),
    "lint:ignore-instructions": N_("it tells assistants to ignore their instructions"),
    "lint:pipe-to-shell": N_("it pipes a download into a shell"),
    "lint:exfiltrate-secrets": N_("it asks to send secrets somewhere"),
    "lint:imperative-line": N_("it gives standing orders"),
    "lint:command": N_("it holds a command to run"),
    "lint:imperative-url": N_("it tells to open or download an address"),
}


def type_label(value: str) -> str:
    """The message naming memory type ``value`` (the value itself when unknown)."""
    return TYPE_LABELS.get(value, value)


def origin_label(value: str) -> str:
    """The message naming origin ``value`` (the value itself when unknown)."""
    return ORIGIN_LABELS.get(value, value)


def reason_label(value: str) -> str:
    """The message saying why a write is held, for the code the brain records (the code when unknown)."""
    return REASON_LABELS.get(value, value)
